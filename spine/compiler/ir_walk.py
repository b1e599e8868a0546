"""Finding the operations a rewrite applies to: collected in one walk first, then rewritten, since MLIR's
walk must not meet operations its callback erased or replaced."""
from __future__ import annotations

from typing import Callable


def collect_ops(module, wanted: Callable) -> list:
    """Every operation of `module` (as `ir.Operation`, in walk order) for which `wanted(operation)` is true."""
    from mlir import ir
    found = []

    def visit(op):
        if wanted(op.operation):
            found.append(op.operation)
        return ir.WalkResult.ADVANCE
    module.operation.walk(visit)
    return found
