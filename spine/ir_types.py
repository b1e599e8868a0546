"""The bits of MLIR's scalar types, which the conversion (pointer casts, the packed matmul's panels) and the
lowering's passes (streaming stores) all read."""
from __future__ import annotations


def bits(ty) -> int:
    """The bits of an integer or float type (i1: 1, bf16: 16); 0 for a type without a width (index, a
    pointer), which callers read as "not a sized number"."""
    from mlir import ir
    if isinstance(ty, ir.IntegerType):
        return ir.IntegerType(ty).width
    if isinstance(ty, ir.FloatType):
        return ir.FloatType(ty).width
    return 0
