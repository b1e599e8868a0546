"""Float ops the lowering would get wrong as they are, rewritten into ops it handles exactly.

    math.ceil            -floor(-x). The lowering's math-expand-ops expands ceil through fptosi to i64,
                         which is poison for |x| >= 2^63, infinities and NaN.
    math.exp2            2^n * exp(f * ln2) with n = round(x), |f| <= 1/2 (about 1.5 ulp). math-expand-ops
                         would make it exp(x * ln2), whose error grows with |x| (tens of ulp at x = 100).
    arith.truncf f64 → bf16     through f32 rounded to odd, then to bf16 (to nearest even): correctly
                         rounded, where the lowering has no f64 → bf16 (LLVM calls compiler-rt's
                         __truncdfbf2, which kernels are not linked against).
    arith.sitofp/uitofp → bf16 from 32/64-bit integers     likewise through a float64 rounded to odd; the
                         bf16 emulation would convert through f32, rounding twice.
    arith.sitofp/uitofp → f16 from 32/64-bit integers      the integer clamped to ±65520 first, which
                         changes no result (every integer from 65520 up rounds to infinity in f16).
                         LLVM's InstCombine rewrites fpext(sitofp x to half) and fptosi(sitofp ...) as a
                         single cast when x's known bits say it has at most 11 significant bits, without
                         asking whether x fits half's exponent range: x * -2^31 came back as -2^31, not
                         -inf. After the clamp no integer can overflow half, so that rewrite is exact.

Rounding to odd (truncate, then set the last bit if anything was lost) keeps enough information for one
later rounding to nearest to be exact, as long as the intermediate format has at least two more bits.
Each rewrite works on scalars (inside combiners) and on tensors alike.
"""
from __future__ import annotations

from mlir import ir
from mlir.dialects import arith
from mlir.dialects import math as math_d

from . import states as st
from .converter import DIALECT_HANDLERS, handles
from .elementwise import const as _const
from .elementwise import like as _like
from .types import element_type

LN2 = 0.6931471805599453


def _is(ty: ir.Type, cls) -> bool:
    return isinstance(element_type(ty), cls)


def _rewrite(conv, op, build) -> None:
    """Bind op's result to build(operand); a splat operand is rewritten as a scalar and splat again."""
    state = conv.state(op.operands[0])
    if isinstance(state, st.SplatValue):
        conv.bind(op.results[0], st.SplatValue(state.shape, build(state.scalar)))
    else:
        conv.bind(op.results[0], build(conv.concrete(op.operands[0])))


def _generic(conv, op) -> None:
    DIALECT_HANDLERS[op.operation.name.split(".", 1)[0] + "."](conv, op)


# ----------------------------------------------------------------------------------------- ceil, exp2

@handles("math.ceil")
def convert_ceil(conv, op):
    def build(x):
        return arith.NegFOp(math_d.FloorOp(arith.NegFOp(x).result).result).result
    _rewrite(conv, op, build)


def _pow2(k: ir.Value, float_like: ir.Type) -> ir.Value:
    """2^k for i32 k inside the normal exponent range of the float type, from the exponent bits."""
    f64 = _is(float_like, ir.F64Type)
    if f64:
        k = arith.ExtSIOp(_like(k, ir.IntegerType.get_signless(64)), k).result
    bias, shift = (1023, 52) if f64 else (127, 23)
    biased = arith.AddIOp(k, _const(k.type, bias)).result
    bits = arith.ShLIOp(biased, _const(k.type, shift)).result
    return arith.BitcastOp(float_like, bits).result


def exp2(x: ir.Value) -> ir.Value:
    ty = x.type
    # |n| <= limit keeps both halves of the scaling inside the normal exponent range; beyond it the
    # result has over- or underflowed anyway.
    limit = 2044.0 if _is(ty, ir.F64Type) else 250.0
    clamped = arith.MinimumFOp(arith.MaximumFOp(x, _const(ty, -limit)).result, _const(ty, limit)).result
    n = math_d.FloorOp(arith.AddFOp(clamped, _const(ty, 0.5)).result).result
    f = arith.SubFOp(clamped, n).result                                   # exact, |f| <= 1/2
    y = math_d.ExpOp(arith.MulFOp(f, _const(ty, LN2)).result).result
    k = arith.FPToSIOp(_like(x, ir.IntegerType.get_signless(32)), n).result
    k1 = arith.ShRSIOp(k, _const(k.type, 1)).result
    k2 = arith.SubIOp(k, k1).result
    scaled = arith.MulFOp(arith.MulFOp(y, _pow2(k1, ty)).result, _pow2(k2, ty)).result
    is_nan = arith.CmpFOp(arith.CmpFPredicate.UNO, x, x).result
    return arith.SelectOp(is_nan, x, scaled).result


@handles("math.exp2")
def convert_exp2(conv, op):
    if not _is(op.results[0].type, (ir.F32Type, ir.F64Type)):
        return _generic(conv, op)
    _rewrite(conv, op, exp2)


# ------------------------------------------------------------------------------------- to bfloat16

def _round_to_odd(exact_bigger: ir.Value, inexact: ir.Value, rounded: ir.Value, int_elem: ir.Type) -> ir.Value:
    """`rounded` (to nearest) made the odd neighbour toward zero where it lost something."""
    bits = arith.BitcastOp(_like(rounded, int_elem), rounded).result
    one = _const(bits.type, 1)
    bits = arith.SelectOp(exact_bigger, arith.SubIOp(bits, one).result, bits).result   # one ulp toward 0
    bits = arith.SelectOp(inexact, arith.OrIOp(bits, one).result, bits).result
    return arith.BitcastOp(rounded.type, bits).result


def f64_to_f32_odd(x: ir.Value) -> ir.Value:
    t = arith.TruncFOp(_like(x, ir.F32Type.get()), x).result
    back = arith.ExtFOp(x.type, t).result
    inexact = arith.CmpFOp(arith.CmpFPredicate.ONE, back, x).result
    bigger = arith.CmpFOp(arith.CmpFPredicate.OGT, math_d.AbsFOp(back).result, math_d.AbsFOp(x).result).result
    return _round_to_odd(bigger, inexact, t, ir.IntegerType.get_signless(32))


def i64_to_f64_odd(x: ir.Value, signed: bool) -> ir.Value:
    """A 64-bit integer as float64 rounded to odd: the exact halves hi * 2^32 + lo summed once, the sum's
    rounding error recovered exactly (Knuth's two-sum)."""
    f64 = _like(x, ir.F64Type.get())
    shift = _const(x.type, 32)
    hi = (arith.ShRSIOp if signed else arith.ShRUIOp)(x, shift).result
    lo = arith.AndIOp(x, _const(x.type, 0xFFFFFFFF)).result
    a = arith.MulFOp((arith.SIToFPOp if signed else arith.UIToFPOp)(f64, hi).result, _const(f64, 2.0 ** 32)).result
    b = arith.UIToFPOp(f64, lo).result
    s = arith.AddFOp(a, b).result
    b_virtual = arith.SubFOp(s, a).result
    a_virtual = arith.SubFOp(s, b_virtual).result
    error = arith.AddFOp(arith.SubFOp(a, a_virtual).result, arith.SubFOp(b, b_virtual).result).result
    zero = _const(f64, 0.0)
    inexact = arith.CmpFOp(arith.CmpFPredicate.ONE, error, zero).result
    # |s| exceeds the exact sum where the error points back toward zero.
    s_positive = arith.CmpFOp(arith.CmpFPredicate.OGT, s, zero).result
    error_positive = arith.CmpFOp(arith.CmpFPredicate.OGT, error, zero).result
    bigger = arith.AndIOp(inexact, arith.XOrIOp(s_positive, error_positive).result).result
    return _round_to_odd(bigger, inexact, s, ir.IntegerType.get_signless(64))


@handles("arith.truncf")
def convert_truncf(conv, op):
    source, result = op.operands[0].type, op.results[0].type
    if not (_is(source, ir.F64Type) and _is(result, ir.BF16Type)):
        return _generic(conv, op)
    _rewrite(conv, op, lambda x: arith.TruncFOp(_like(x, ir.BF16Type.get()), f64_to_f32_odd(x)).result)


# Every integer of magnitude 65520 or more rounds to infinity in f16 (65520 lies halfway between the
# largest half, 65504, and 2^16, and ties go to the even one, 2^16, which overflows).
F16_OVERFLOW = 65520


def clamp_to_f16_range(x: ir.Value, signed: bool) -> ir.Value:
    """x with every magnitude past F16_OVERFLOW brought down to it: converts to the same f16."""
    top = _const(x.type, F16_OVERFLOW)
    if not signed:
        return arith.MinUIOp(x, top).result
    return arith.MinSIOp(arith.MaxSIOp(x, _const(x.type, -F16_OVERFLOW)).result, top).result


@handles("arith.sitofp", "arith.uitofp")
def convert_int_to_float(conv, op):
    source, result = element_type(op.operands[0].type), element_type(op.results[0].type)
    signed = op.operation.name == "arith.sitofp"
    # Narrower integers than 17 bits all lie inside half's range (uint16's 65535 included: an integer
    # with at most 11 significant bits below 2^16 is at most 65504).
    wide = isinstance(source, ir.IntegerType) and source.width > 16
    if wide and isinstance(result, ir.F16Type):
        cast = arith.SIToFPOp if signed else arith.UIToFPOp
        _rewrite(conv, op, lambda x: cast(_like(x, result), clamp_to_f16_range(x, signed)).result)
        return
    if not (isinstance(result, ir.BF16Type) and wide):
        return _generic(conv, op)

    def build(x):
        if source.width == 64:
            wide = i64_to_f64_odd(x, signed)
        else:                                   # exact in float64
            wide = (arith.SIToFPOp if signed else arith.UIToFPOp)(_like(x, ir.F64Type.get()), x).result
        return arith.TruncFOp(_like(x, ir.BF16Type.get()), f64_to_f32_odd(wide)).result
    _rewrite(conv, op, build)
