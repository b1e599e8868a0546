"""Which kernel arguments the integer behind a dereferenced `tt.int_to_ptr` comes from.

A kernel that makes a pointer of an integer reads this process's addresses: a table of tensors'
`data_ptr()`s (grouped GEMM, MoE) or an address passed as an integer. Where kernels run in another address
space (a QEMU guest's arena), the launcher must translate those addresses, and can only where it knows
which arguments hold them. This walks the TTIR from the integer back to them:

    %p = tt.addptr %table, %g : !tt.ptr<i64>, i32      %table: argument 0
    %v = tt.load %p : !tt.ptr<i64>
    %a = tt.int_to_ptr %v : i64 -> !tt.ptr<f16>         origins(%v) == {0}

through widenings, splats and broadcasts, additions and subtractions (an address and an offset: both
sides' origins, since the walk cannot tell which is the address; a side of unknown origin makes the whole
unknown), loads (the argument the pointer points into), constants (no origin) and the function's own
integer arguments. Anything else (a loop-carried value, a call's result, a product) has no known
origin: None.
"""
from __future__ import annotations

from mlir import ir

from ..ir_walk import defining_op

_SAME_VALUE = {"arith.extsi", "arith.extui", "arith.trunci", "arith.bitcast", "tt.splat", "tt.broadcast",
               "tt.expand_dims", "tt.reshape", "tt.bitcast", "tt.ptr_to_int", "tt.int_to_ptr"}
_OFFSET = {"arith.addi", "arith.subi"}
_POINTER_STEPS = {"tt.addptr", "tt.splat", "tt.broadcast", "tt.expand_dims", "tt.reshape", "tt.bitcast"}
_DEPTH = 64   # the longest chain followed: longer ones count as unknown


def origins(value: ir.Value) -> frozenset | None:
    """The runtime-argument indexes whose values (a scalar argument) or contents (a pointer argument the
    integer was loaded through) may hold the address `value` is made of; None when it cannot tell."""
    return _origins(value, _DEPTH)


def _origins(value: ir.Value, depth: int) -> frozenset | None:
    if depth == 0:
        return None
    op = defining_op(value)
    if op is None:
        return _function_argument(value)
    name = op.name
    if name == "tt.load":
        return _pointer_origin(op.operands[0], depth - 1)
    if name in _SAME_VALUE:
        return _origins(op.operands[0], depth - 1)
    if name in _OFFSET:
        sides = [_origins(operand, depth - 1) for operand in op.operands[:2]]
        return None if None in sides else sides[0] | sides[1]
    if name == "arith.constant":
        return frozenset()   # an offset, not an address
    return None


def _pointer_origin(pointer: ir.Value, depth: int) -> frozenset | None:
    """The argument a pointer (or tensor of pointers) points into, as a one-element set."""
    for _ in range(depth):
        op = defining_op(pointer)
        if op is None:
            return _function_argument(pointer)
        if op.name not in _POINTER_STEPS:
            return None
        pointer = op.operands[0]
    return None


def _function_argument(argument: ir.BlockArgument) -> frozenset | None:
    parent = argument.owner.owner
    if parent is None or parent.operation.name != "tt.func":
        return None
    return frozenset({argument.arg_number})
