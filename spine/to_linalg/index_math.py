"""Index arithmetic that folds constants while it emits.

Pointer and mask states hold offsets, strides and bounds as `Index`: a Python int when known at compile
time, otherwise an MLIR value of type `index`. Folding here keeps the emitted IR small and lets the states
compare strides structurally (the same int, or the same SSA value)."""
from __future__ import annotations

from typing import Union

from mlir import ir
from mlir.dialects import arith

Index = Union[int, ir.Value]


def index_type() -> ir.Type:
    return ir.IndexType.get()


def const(value: int) -> ir.Value:
    return arith.ConstantOp(index_type(), value).result


def as_value(x: Index) -> ir.Value:
    return const(x) if isinstance(x, int) else x


def same(a: Index, b: Index) -> bool:
    if isinstance(a, int) or isinstance(b, int):
        return isinstance(a, int) and isinstance(b, int) and a == b
    return a == b


def add(a: Index, b: Index) -> Index:
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    if isinstance(a, int) and a == 0:
        return b
    if isinstance(b, int) and b == 0:
        return a
    return arith.AddIOp(as_value(a), as_value(b)).result


def sub(a: Index, b: Index) -> Index:
    if isinstance(a, int) and isinstance(b, int):
        return a - b
    if isinstance(b, int) and b == 0:
        return a
    return arith.SubIOp(as_value(a), as_value(b)).result


def mul(a: Index, b: Index) -> Index:
    if isinstance(a, int) and isinstance(b, int):
        return a * b
    for x, y in ((a, b), (b, a)):
        if isinstance(x, int):
            if x == 0:
                return 0
            if x == 1:
                return y
    return arith.MulIOp(as_value(a), as_value(b)).result


def minimum(a: Index, b: Index) -> Index:
    if isinstance(a, int) and isinstance(b, int):
        return min(a, b)
    return arith.MinSIOp(as_value(a), as_value(b)).result


def maximum(a: Index, b: Index) -> Index:
    if isinstance(a, int) and isinstance(b, int):
        return max(a, b)
    return arith.MaxSIOp(as_value(a), as_value(b)).result


def ceil_div(a: Index, b: int) -> Index:
    """Ceiling division by a positive compile-time constant."""
    if isinstance(a, int):
        return -((-a) // b)
    if b == 1:
        return a
    return arith.CeilDivSIOp(a, const(b)).result


def clamp(x: Index, lo: Index, hi: Index) -> Index:
    return minimum(maximum(x, lo), hi)


def select(cond: ir.Value, a: Index, b: Index) -> Index:
    if same(a, b):
        return a
    return arith.SelectOp(cond, as_value(a), as_value(b)).result


def from_integer(value: ir.Value) -> Index:
    """An integer scalar (any width, signed) as an index."""
    if isinstance(value.type, ir.IndexType):
        return value
    return arith.IndexCastOp(index_type(), value).result


def to_integer(x: Index, ty: ir.Type) -> ir.Value:
    if isinstance(x, int):
        return arith.ConstantOp(ty, x).result
    if isinstance(ty, ir.IndexType):
        return x
    return arith.IndexCastOp(ty, x).result
