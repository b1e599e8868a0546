"""The compiler's table of contents as the README shows it, made from the declared stages and pipelines
(`python -m spine.compiler.describe` prints it; a test keeps the README's copy equal to it)."""
from __future__ import annotations

# (stage, what it does, where): the stages CPUBackend.add_stages registers, in order, and the launch after them
STAGES = (
    ("ttir", "triton's own TTIR passes; the module exported in generic MLIR form",
     "`spine/compiler/ttir.py`, `export.py`"),
    ("linalg", "our conversion to linalg/tensor/memref/scf (pointer and mask analysis)", "`spine/to_linalg/`"),
    ("llir", "the MLIR passes below, the module translated to LLVM IR, then the LLVM passes below (O3: the "
     "loop vectoriser emits RVV)", "`spine/compiler/lower.py`, `codegen.py`"),
    ("obj", "the target's machine code", "`spine/compiler/codegen.py`"),
    ("so", "the uniform entry point's library, linked with lld", "`spine/compiler/entry.py`, `link.py`"),
    ("launch", "the grid on a thread pool, in-process, in a QEMU guest server or on a board",
     "`spine/driver/`, `cpp/`"),
)


def markdown() -> str:
    from .codegen import LLVM_PIPELINE
    from .lower import LLIR_PIPELINE
    lines = ["| stage | what | where |", "|---|---|---|"]
    lines += [f"| `{name}` | {what} | {where} |" for name, what, where in STAGES]
    lines += ["", "The `llir` stage's passes, in order (`python -m spine.compiler.lower list`; "
              "`SPINE_DUMP_PASSES` dumps the module after each):", ""]
    lines += [f"{i + 1}. `{p.name}`: {p.summary}" + _condition(p) for i, p in enumerate(LLIR_PIPELINE)]
    lines += ["", "then, on the LLVM IR:", ""]
    lines += [f"{i + 1}. `{p.name}`: {p.summary}" + _condition(p) for i, p in enumerate(LLVM_PIPELINE)]
    return "\n".join(lines) + "\n"


def _condition(step) -> str:
    from .passes import _always
    return "" if step.when is _always else f" (only {step.when.__doc__.strip()})"


if __name__ == "__main__":
    print(markdown(), end="")
