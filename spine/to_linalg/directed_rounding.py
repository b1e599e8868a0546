"""libdevice's arithmetic and conversions with a rounding mode: _rn (to nearest even), _rz (toward zero),
_rd (down), _ru (up); and float → integer conversions, which saturate as CUDA's do (NaN → 0).

A CPU rounds to nearest. Each op is computed that way (r), together with the sign of its exact error v - r
from an error-free transformation; the directed result is then r or its neighbour on the needed side:

    up: v > r → next_up(r)      down: v < r → next_down(r)      toward zero: |v| < |r| → one step nearer 0

f32 ops are exact in f64 first: the product of two f32 is exact in f64, a sum is exact as the pair of
TwoSum, a quotient or square root rounded to f64 and then to f32 is rounded correctly, and the error's
sign comes from an f64 fma (exact products). f64 ops use TwoSum and fma residuals in f64 itself: exact
except where the residual underflows (results within a few ulp of the smallest normal), where the
direction can be missed. Integer → float conversions compare the rounded value, converted back exactly,
with the integer.
"""
from __future__ import annotations

from mlir import ir
from mlir.dialects import arith
from mlir.dialects import math as math_d

from . import elementwise as ew
from .elementwise import const_like, element_of, like

F32, F64 = ir.F32Type.get, ir.F64Type.get
MODES = ("rn", "rz", "rd", "ru")


def _sign_of(residual: ir.Value) -> tuple[ir.Value, ir.Value]:
    zero = const_like(residual, 0.0)
    return (ew.fcmp(arith.CmpFPredicate.OGT, residual, zero), ew.fcmp(arith.CmpFPredicate.OLT, residual, zero))


def directed(r: ir.Value, above: ir.Value, below: ir.Value, mode: str) -> ir.Value:
    """r (the value rounded to nearest) moved to the neighbour the mode asks for, given whether the exact
    value lies `above` or `below` it."""
    if mode == "rn":
        return r
    if mode == "ru":
        return ew.select(above, ew.next_up(r), r)
    if mode == "rd":
        return ew.select(below, ew.next_down(r), r)
    zero = const_like(r, 0.0)
    positive = ew.fcmp(arith.CmpFPredicate.OGT, r, zero)
    negative = ew.fcmp(arith.CmpFPredicate.OLT, r, zero)
    inward = ew.either(ew.both(positive, below), ew.both(negative, above))
    return ew.select(inward, ew.toward_zero(r), r)


def _is_f32(x: ir.Value) -> bool:
    return isinstance(element_of(x), ir.F32Type)


def _from_f64_pair(s: ir.Value, e: ir.Value, mode: str) -> ir.Value:
    """The exact value s + e (f64 pair) rounded to f32 in the mode."""
    r = ew.truncate_float(s, F32())
    # s - r is exact (r is within an f32 ulp of s); adding e keeps the sign of the exact difference.
    residual = arith.AddFOp(arith.SubFOp(s, ew.extend_float(r, F64())).result, e).result
    return directed(r, *_sign_of(residual), mode)


def add(a: ir.Value, b: ir.Value, mode: str) -> ir.Value:
    if _is_f32(a):
        s, e = ew.two_sum(ew.extend_float(a, F64()), ew.extend_float(b, F64()))
        return _from_f64_pair(s, e, mode)
    r, e = ew.two_sum(a, b)
    # An overflow to infinity from finite operands lies beyond the exact value (TwoSum's error is NaN).
    overflow = ew.both(ew.is_inf(r), ew.both(ew.is_finite(a), ew.is_finite(b)))
    residual = ew.select(overflow, arith.NegFOp(r).result, e)
    return directed(r, *_sign_of(residual), mode)


def sub(a: ir.Value, b: ir.Value, mode: str) -> ir.Value:
    return add(a, arith.NegFOp(b).result, mode)


def mul(a: ir.Value, b: ir.Value, mode: str) -> ir.Value:
    if _is_f32(a):
        p = arith.MulFOp(ew.extend_float(a, F64()), ew.extend_float(b, F64())).result    # exact
        return _from_f64_pair(p, const_like(p, 0.0), mode)
    r = arith.MulFOp(a, b).result
    return directed(r, *_sign_of(math_d.FmaOp(a, b, arith.NegFOp(r).result).result), mode)


def div(a: ir.Value, b: ir.Value, mode: str) -> ir.Value:
    wide_a, wide_b = (ew.extend_float(a, F64()), ew.extend_float(b, F64())) if _is_f32(a) else (a, b)
    q = arith.DivFOp(wide_a, wide_b).result
    r = ew.truncate_float(q, F32()) if _is_f32(a) else q
    wide_r = ew.extend_float(r, element_of(wide_a))
    # sign(a/b - r) = sign(a - r*b) * sign(b); the fma computes a - r*b exactly before rounding once.
    rest = math_d.FmaOp(arith.NegFOp(wide_r).result, wide_b, wide_a).result
    residual = ew.select(ew.fcmp(arith.CmpFPredicate.OLT, wide_b, const_like(wide_b, 0.0)),
                         arith.NegFOp(rest).result, rest)
    return directed(r, *_sign_of(residual), mode)


def rcp(x: ir.Value, mode: str) -> ir.Value:
    return div(const_like(x, 1.0), x, mode)


def sqrt(x: ir.Value, mode: str) -> ir.Value:
    wide = ew.extend_float(x, F64()) if _is_f32(x) else x
    s = math_d.SqrtOp(wide).result
    r = ew.truncate_float(s, F32()) if _is_f32(x) else s
    wide_r = ew.extend_float(r, element_of(wide))
    residual = math_d.FmaOp(arith.NegFOp(wide_r).result, wide_r, wide).result      # x - r*r
    return directed(r, *_sign_of(residual), mode)


def fma(a: ir.Value, b: ir.Value, c: ir.Value, mode: str) -> ir.Value:
    if _is_f32(a):
        p = arith.MulFOp(ew.extend_float(a, F64()), ew.extend_float(b, F64())).result    # exact
        s, e = ew.two_sum(p, ew.extend_float(c, F64()))
        return _from_f64_pair(s, e, mode)
    r = math_d.FmaOp(a, b, c).result
    if mode == "rn":
        return r
    p = arith.MulFOp(a, b).result
    p_error = math_d.FmaOp(a, b, arith.NegFOp(p).result).result                     # a*b = p + p_error
    s, e = ew.two_sum(p, c)                                                          # p + c = s + e
    y, y_error = ew.two_sum(arith.SubFOp(s, r).result, e)
    residual = arith.AddFOp(y, arith.AddFOp(y_error, p_error).result).result         # a*b + c - r
    return directed(r, *_sign_of(residual), mode)


def narrow(x: ir.Value, mode: str) -> ir.Value:
    """f64 → f32."""
    r = ew.truncate_float(x, F32())
    residual = arith.SubFOp(x, ew.extend_float(r, F64())).result
    return directed(r, *_sign_of(residual), mode)


# ------------------------------------------------------------------------------ integer → float

def int_to_float(x: ir.Value, target: ir.Type, signed: bool, mode: str) -> ir.Value:
    r = (arith.SIToFPOp if signed else arith.UIToFPOp)(like(x, target), x).result
    if mode == "rn":
        return r
    if element_of(x).width <= 32:
        # Both sides are exact in f64: compare there.
        wide_x = (arith.SIToFPOp if signed else arith.UIToFPOp)(like(x, F64()), x).result
        return directed(r, *_sign_of(arith.SubFOp(wide_x, ew.extend_float(r, F64())).result), mode)
    # 64-bit integers: r, an integer whenever the conversion was inexact, read back from its bits (an
    # fptosi of it would become a widening vector conversion that QEMU 7.2 cannot translate). r rounded to
    # 2^63 (2^64 unsigned) lies above every x.
    limit = 2.0 ** 63 if signed else 2.0 ** 64
    too_big = ew.fcmp(arith.CmpFPredicate.OGE, r, const_like(r, limit))
    back = _integral_float_as_i64(r)
    lt, gt = ((arith.CmpIPredicate.slt, arith.CmpIPredicate.sgt) if signed
              else (arith.CmpIPredicate.ult, arith.CmpIPredicate.ugt))
    mantissa_bits = 23 if isinstance(target, ir.F32Type) else 52
    inexact = ew.both(ew.fcmp(arith.CmpFPredicate.OGE, math_d.AbsFOp(r).result, const_like(r, 2.0 ** (mantissa_bits + 1))),
                      ew.fcmp(arith.CmpFPredicate.OLT, r, const_like(r, limit)))
    above = ew.both(inexact, ew.icmp(gt, x, back))
    below = ew.either(too_big, ew.both(inexact, ew.icmp(lt, x, back)))
    return directed(r, above, below, mode)


def _integral_float_as_i64(r: ir.Value) -> ir.Value:
    """The integer value of a float r with 2^(mantissa bits) <= |r| < 2^64, as i64 bits (a magnitude at
    or above 2^63 reads as unsigned)."""
    i64 = like(r, ew.int_type(64))
    b = ew.bits(r)
    if element_of(b).width < 64:
        b = arith.ExtUIOp(i64, b).result
    mantissa_bits, bias, exponent_mask = (23, 127, 0xFF) if isinstance(element_of(r), ir.F32Type) else (52, 1023, 0x7FF)
    exponent = arith.AndIOp(arith.ShRUIOp(b, const_like(b, mantissa_bits)).result, const_like(b, exponent_mask)).result
    shift = arith.MaxSIOp(arith.SubIOp(exponent, const_like(b, bias + mantissa_bits)).result, const_like(b, 0)).result
    significand = arith.OrIOp(arith.AndIOp(b, const_like(b, (1 << mantissa_bits) - 1)).result,
                              const_like(b, 1 << mantissa_bits)).result
    magnitude = arith.ShLIOp(significand, shift).result
    negative = ew.fcmp(arith.CmpFPredicate.OLT, r, const_like(r, 0.0))
    return ew.select(negative, arith.SubIOp(const_like(magnitude, 0), magnitude).result, magnitude)


# ------------------------------------------------------------------------------ float → integer

def round_to_integral(x: ir.Value, mode: str) -> ir.Value:
    if mode == "rn":
        return math_d.RoundEvenOp(x).result
    if mode == "rz":
        return math_d.TruncOp(x).result
    if mode == "rd":
        return math_d.FloorOp(x).result
    return ew.ceil(x)


def saturating_to_int(x: ir.Value, result: ir.Type, signed: bool) -> ir.Value:
    """An integral float as an integer of `result`'s type, saturating at its range, NaN → 0 (an
    out-of-range arith.fptosi would be poison)."""
    width = element_of(result).width
    lo = -(2.0 ** (width - 1)) if signed else 0.0
    hi = 2.0 ** (width - 1) if signed else 2.0 ** width          # first value beyond the range
    below_hi = _largest_below(hi, element_of(x))
    clamped = arith.MinimumFOp(arith.MaximumFOp(x, const_like(x, lo)).result, const_like(x, below_hi)).result
    clamped = ew.select(ew.is_nan(x), const_like(x, 0.0), clamped)
    value = _same_width_to_int(clamped, element_of(result), signed)
    top = (1 << (width - 1)) - 1 if signed else -1                 # -1 is the all-ones unsigned maximum
    return ew.select(ew.fcmp(arith.CmpFPredicate.OGE, x, const_like(x, hi)), const_like(value, top), value)


def _same_width_to_int(x: ir.Value, result: ir.Type, signed: bool) -> ir.Value:
    """fptosi/fptoui between types of one width (exact for the integral, in-range x given). Conversions that
    widen or narrow (f32 → i64, f64 → i32) become RVV's vfwcvt.rtz / vfncvt.rtz, which crash QEMU 7.2's
    translator; extending the float first, or truncating the integer after, avoids them."""
    float_width, int_width = element_of(x).width, result.width
    if float_width < int_width:
        x = ew.extend_float(x, ew.float_of_width(int_width))
    wide = ew.int_type(max(float_width, int_width))
    value = (arith.FPToSIOp if signed else arith.FPToUIOp)(like(x, wide), x).result
    return value if wide == result else arith.TruncIOp(like(x, result), value).result


def _largest_below(power_of_two: float, elem: ir.Type) -> float:
    mantissa_bits = 24 if isinstance(elem, ir.F32Type) else 53
    return power_of_two - power_of_two / 2 ** mantissa_bits


def float_to_int(x: ir.Value, result: ir.Type, signed: bool, mode: str) -> ir.Value:
    return saturating_to_int(round_to_integral(x, mode), result, signed)
