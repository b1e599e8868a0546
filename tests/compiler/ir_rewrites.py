"""Running one of the lowering's rewrites on IR text, the way MLIR's own tests run a pass."""


def rewritten(text: str, rewrite) -> str:
    """The module `text` after `rewrite(module)`, verified, as text."""
    from mlir import ir
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        rewrite(module)
        module.operation.verify()
        return str(module)
