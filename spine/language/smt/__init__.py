"""spine-triton's matrix-tile API (`triton.language.extra.smt`).

Only the module exists so far, so that `import triton.language.extra.smt as smt` works; the tile
operations (descriptor_load, view, dot, parallel, ...) are not implemented yet and are absent rather than
stubbed."""
