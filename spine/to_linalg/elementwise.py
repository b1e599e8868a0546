"""Helpers that build arith/math ops on scalars and tensors alike (a tensor operand makes every constant a
splat of its shape), for the expansions of fp8 conversions and libdevice functions."""
from __future__ import annotations

from mlir import ir
from mlir.dialects import arith
from mlir.dialects import math as math_d


def element_of(value_or_type) -> ir.Type:
    ty = value_or_type.type if isinstance(value_or_type, ir.Value) else value_or_type
    return ty.element_type if isinstance(ty, ir.RankedTensorType) else ty


def like(value: ir.Value, elem: ir.Type) -> ir.Type:
    """The type of `value` with element type `elem` (a scalar stays a scalar)."""
    if isinstance(value.type, ir.RankedTensorType):
        return ir.RankedTensorType.get(list(ir.RankedTensorType(value.type).shape), elem)
    return elem


def const(ty: ir.Type, value) -> ir.Value:
    """A constant of type `ty` (a splat for a tensor type)."""
    elem = element_of(ty)
    attr = ir.FloatAttr.get(elem, value) if isinstance(elem, ir.FloatType) else ir.IntegerAttr.get(elem, value)
    if isinstance(ty, ir.RankedTensorType):
        attr = ir.DenseElementsAttr.get_splat(ty, attr)
    return arith.ConstantOp(ty, attr).result


def const_like(value: ir.Value, number) -> ir.Value:
    return const(value.type, number)


def int_type(width: int) -> ir.Type:
    return ir.IntegerType.get_signless(width)


def float_of_width(width: int) -> ir.Type:
    return {16: ir.F16Type.get(), 32: ir.F32Type.get(), 64: ir.F64Type.get()}[width]


def width(value: ir.Value) -> int:
    return element_of(value).width


def bits(x: ir.Value) -> ir.Value:
    """A float's bit pattern as a signless integer of its width."""
    return arith.BitcastOp(like(x, int_type(width(x))), x).result


def from_bits(b: ir.Value, elem: ir.Type) -> ir.Value:
    return arith.BitcastOp(like(b, elem), b).result


def select(cond: ir.Value, a: ir.Value, b: ir.Value) -> ir.Value:
    return arith.SelectOp(cond, a, b).result


def fcmp(predicate, a: ir.Value, b: ir.Value) -> ir.Value:
    return arith.CmpFOp(predicate, a, b).result


def icmp(predicate, a: ir.Value, b: ir.Value) -> ir.Value:
    return arith.CmpIOp(predicate, a, b).result


def is_nan(x: ir.Value) -> ir.Value:
    return fcmp(arith.CmpFPredicate.UNO, x, x)


def is_inf(x: ir.Value) -> ir.Value:
    return fcmp(arith.CmpFPredicate.OEQ, math_d.AbsFOp(x).result, const_like(x, float("inf")))


def is_finite(x: ir.Value) -> ir.Value:
    return fcmp(arith.CmpFPredicate.OLT, math_d.AbsFOp(x).result, const_like(x, float("inf")))


def both(a: ir.Value, b: ir.Value) -> ir.Value:
    return arith.AndIOp(a, b).result


def either(a: ir.Value, b: ir.Value) -> ir.Value:
    return arith.OrIOp(a, b).result


def extend_float(x: ir.Value, elem: ir.Type) -> ir.Value:
    return x if element_of(x) == elem else arith.ExtFOp(like(x, elem), x).result


def truncate_float(x: ir.Value, elem: ir.Type) -> ir.Value:
    return x if element_of(x) == elem else arith.TruncFOp(like(x, elem), x).result


def ceil(x: ir.Value) -> ir.Value:
    """-floor(-x): math.ceil's upstream expansion goes through an i64 conversion (wrong beyond 2^63)."""
    return arith.NegFOp(math_d.FloorOp(arith.NegFOp(x).result).result).result


def two_sum(a: ir.Value, b: ir.Value) -> tuple[ir.Value, ir.Value]:
    """s = a + b rounded and its exact error e (a + b = s + e), for finite results (Knuth)."""
    s = arith.AddFOp(a, b).result
    b_virtual = arith.SubFOp(s, a).result
    a_virtual = arith.SubFOp(s, b_virtual).result
    e = arith.AddFOp(arith.SubFOp(a, a_virtual).result, arith.SubFOp(b, b_virtual).result).result
    return s, e


def next_up(x: ir.Value) -> ir.Value:
    """The next float above x (x < +inf): one step of the bit pattern, -0 and +0 going to the smallest
    subnormal."""
    b = bits(x)
    one = const_like(b, 1)
    negative = icmp(arith.CmpIPredicate.slt, b, const_like(b, 0))
    stepped = select(negative, arith.SubIOp(b, one).result, arith.AddIOp(b, one).result)
    zero = fcmp(arith.CmpFPredicate.OEQ, x, const_like(x, 0.0))
    return select(zero, from_bits(one, element_of(x)), from_bits(stepped, element_of(x)))


def next_down(x: ir.Value) -> ir.Value:
    return arith.NegFOp(next_up(arith.NegFOp(x).result)).result


def toward_zero(x: ir.Value) -> ir.Value:
    """The neighbour of a nonzero x one step nearer zero (infinities become the largest finite value)."""
    b = bits(x)
    return from_bits(arith.SubIOp(b, const_like(b, 1)).result, element_of(x))
