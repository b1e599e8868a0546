"""libdevice functions the C library lacks, as expansions over arith/math ops (scalars or tensors).

f32 arguments are computed in f64 and rounded once at the end, so these are accurate to about an ulp in
f32; in f64 each says how close it gets.

    sinpi, cospi      sin(pi*f), cos(pi*f) of the exact fraction f = x - round(x) in [-1/2, 1/2], signed by
                      round(x)'s parity: exact zeros and ones at integers and half-integers
    cyl_bessel_i0/i1  power series sum (x/2)^2k / (k! (k+nu)!) for |x| <= 30, the asymptotic expansion
                      e^x / sqrt(2 pi x) * sum c_k / x^k beyond (both converge to f64 precision there)
    erfinv, erfcinv   Newton steps on erf / erfc from a closed-form first guess; erfc near 0 and 2 is
                      solved on erfc itself, so tiny arguments keep their precision
    normcdf(inv)      0.5 * erfc(-x / sqrt 2), -sqrt 2 * erfcinv(2p)
    erfcx             exp(x^2) * erfc(x) with x^2 split exactly (fma); the asymptotic series for x >= 26
    norm3d, norm4d    sqrt of the sum of squares, scaled by the largest magnitude in f64 (no overflow);
                      an infinite argument gives inf even next to NaN, as hypot does
    rsqrt_rn          1/sqrt(x) correctly rounded: the f64 estimate's rounding is checked against the
                      exact midpoint test m^2 * x < 1 (exact with fma)
"""
from __future__ import annotations

import math

from mlir import ir
from mlir.dialects import arith
from mlir.dialects import math as math_d

from . import elementwise as ew
from .elementwise import const_like, element_of

F32, F64 = ir.F32Type.get, ir.F64Type.get
SERIES_LIMIT = 30.0
SERIES_TERMS = 64
ASYMPTOTIC_TERMS = 24


def in_f64(build):
    """Run `build` on f64 arguments; f32 arguments are widened first and the result rounded back."""
    def run(*args):
        narrow = isinstance(element_of(args[0]), ir.F32Type)
        result = build(*[ew.extend_float(a, F64()) if narrow else a for a in args])
        return ew.truncate_float(result, F32()) if narrow else result
    return run


def _add(a, b): return arith.AddFOp(a, b).result
def _sub(a, b): return arith.SubFOp(a, b).result
def _mul(a, b): return arith.MulFOp(a, b).result
def _div(a, b): return arith.DivFOp(a, b).result
def _c(x, value): return const_like(x, value)
def _lt(a, b): return ew.fcmp(arith.CmpFPredicate.OLT, a, b)
def _le(a, b): return ew.fcmp(arith.CmpFPredicate.OLE, a, b)


# ------------------------------------------------------------------------------------- sinpi, cospi

def _fraction_and_parity(x):
    n = math_d.RoundEvenOp(x).result
    f = _sub(x, n)                                                        # exact, |f| <= 1/2
    odd = ew.fcmp(arith.CmpFPredicate.ONE, _sub(n, _mul(_c(x, 2.0), math_d.FloorOp(_mul(n, _c(x, 0.5))).result)),
                  _c(x, 0.0))
    return f, odd


def sinpi(x):
    f, odd = _fraction_and_parity(x)
    s = math_d.SinOp(_mul(_c(f, math.pi), f)).result
    s = ew.select(odd, arith.NegFOp(s).result, s)
    # sin(pi*n) is +0 or -0 with x's sign; infinities and NaN give NaN (f is NaN there)
    return ew.select(ew.fcmp(arith.CmpFPredicate.OEQ, f, _c(f, 0.0)), math_d.CopySignOp(_c(x, 0.0), x).result, s)


def cospi(x):
    f, odd = _fraction_and_parity(x)
    a = math_d.AbsFOp(f).result
    # cos(pi a) = sin(pi (1/2 - a)), with 1/2 - a exact for a >= 1/4: exact zeros at half-integers
    near = math_d.CosOp(_mul(_c(a, math.pi), a)).result
    far = math_d.SinOp(_mul(_c(a, math.pi), _sub(_c(a, 0.5), a))).result
    c = ew.select(_lt(a, _c(a, 0.25)), near, far)
    return ew.select(odd, arith.NegFOp(c).result, c)


# ------------------------------------------------------------------------------------------ Bessel I

def _bessel_i(nu: int):
    """I_nu(|x|) for nu in (0, 1), in f64."""
    def factorial(n): return float(math.factorial(n))
    mu = 4.0 * nu * nu
    asymptotic = [1.0]
    for k in range(1, ASYMPTOTIC_TERMS):
        asymptotic.append(asymptotic[-1] * -(mu - (2 * k - 1) ** 2) / (k * 8.0))

    def build(x):
        a = math_d.AbsFOp(x).result
        small = ew.select(_le(a, _c(a, SERIES_LIMIT)), a, _c(a, SERIES_LIMIT))
        q = _mul(_mul(small, small), _c(a, 0.25))
        term = _c(a, 1.0 / factorial(nu))
        total = term
        for k in range(1, SERIES_TERMS):
            term = _mul(term, _div(q, _c(a, float(k * (k + nu)))))
            total = _add(total, term)
        if nu:
            total = _mul(total, _mul(small, _c(a, 0.5)))
        large = ew.select(_le(a, _c(a, SERIES_LIMIT)), _c(a, SERIES_LIMIT), a)
        inverse = _div(_c(a, 1.0), large)
        poly = _c(a, asymptotic[-1])
        for coefficient in reversed(asymptotic[:-1]):
            poly = _add(_mul(poly, inverse), _c(a, coefficient))
        half = math_d.ExpOp(_mul(large, _c(a, 0.5))).result             # e^x as e^(x/2)^2: no early overflow
        scale = _div(half, math_d.SqrtOp(_mul(large, _c(a, 2.0 * math.pi))).result)
        far = _mul(_mul(poly, scale), half)
        result = ew.select(_le(a, _c(a, SERIES_LIMIT)), total, far)
        return ew.select(ew.is_nan(x), x, result)
    return build


def cyl_bessel_i0(x):
    return in_f64(_bessel_i(0))(x)


def cyl_bessel_i1(x):
    def odd(x64):
        value = _bessel_i(1)(x64)
        return ew.select(_lt(x64, _c(x64, 0.0)), arith.NegFOp(value).result, value)
    return in_f64(odd)(x)


# --------------------------------------------------------------------------------- inverse error functions

TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


def _erfcinv_small(z):
    """erfcinv(z) for 0 < z <= 1/2 (f64): a first guess from erfc's asymptotic form, then Newton steps on
    erfc, convex and decreasing there, so the steps approach the root from below once past it."""
    big_l = arith.NegFOp(math_d.LogOp(z).result).result
    guess = _sub(big_l, _mul(_c(z, 0.5), math_d.LogOp(_mul(_c(z, math.pi), big_l)).result))
    y = math_d.SqrtOp(arith.MaximumFOp(guess, _c(z, 0.25)).result).result
    for _ in range(6):
        derivative = _mul(_c(z, -TWO_OVER_SQRT_PI), math_d.ExpOp(arith.NegFOp(_mul(y, y)).result).result)
        y = _sub(y, _div(_sub(math_d.ErfcOp(y).result, z), derivative))
    return y


def _erfinv_small(a):
    """erfinv(a) for 0 <= a <= 1/2 (f64): the Taylor start sqrt(pi)/2 (a + pi a^3/12), then Newton on erf."""
    a2 = _mul(a, a)
    y = _mul(_c(a, math.sqrt(math.pi) / 2), _mul(a, _add(_c(a, 1.0), _mul(a2, _c(a, math.pi / 12)))))
    for _ in range(4):
        derivative = _mul(_c(a, TWO_OVER_SQRT_PI), math_d.ExpOp(arith.NegFOp(_mul(y, y)).result).result)
        y = _sub(y, _div(_sub(math_d.ErfOp(y).result, a), derivative))
    return y


def _erfinv64(x):
    a = math_d.AbsFOp(x).result
    half = _c(a, 0.5)
    # Above 1/2: erfinv(a) = erfcinv(1 - a), with 1 - a exact (Sterbenz).
    y = ew.select(_le(a, half), _erfinv_small(ew.select(_le(a, half), a, half)),
                  _erfcinv_small(ew.select(_le(a, half), half, _sub(_c(a, 1.0), a))))
    y = ew.select(ew.fcmp(arith.CmpFPredicate.OEQ, a, _c(a, 1.0)), _c(a, float("inf")), y)
    y = ew.select(ew.fcmp(arith.CmpFPredicate.UGT, a, _c(a, 1.0)), _c(a, float("nan")), y)
    return math_d.CopySignOp(y, x).result


def _erfcinv64(x):
    one, two, half = _c(x, 1.0), _c(x, 2.0), _c(x, 0.5)
    # (0, 1/2]: erfcinv itself; (1/2, 3/2): erfinv(1 - x), 1 - x exact; [3/2, 2): -erfcinv(2 - x), exact.
    low = _le(x, half)
    high = ew.fcmp(arith.CmpFPredicate.OGE, x, _c(x, 1.5))
    z = ew.select(low, x, ew.select(high, _sub(two, x), half))
    z = ew.select(_le(z, _c(x, 0.0)), half, z)                             # outside (0, 2): any value
    tail = _erfcinv_small(z)
    y = ew.select(low, tail, ew.select(high, arith.NegFOp(tail).result, _erfinv64(_sub(one, x))))
    y = ew.select(ew.fcmp(arith.CmpFPredicate.OEQ, x, _c(x, 0.0)), _c(x, float("inf")), y)
    y = ew.select(ew.fcmp(arith.CmpFPredicate.OEQ, x, two), _c(x, float("-inf")), y)
    outside = ew.either(_lt(x, _c(x, 0.0)), ew.fcmp(arith.CmpFPredicate.UGT, x, two))
    return ew.select(outside, _c(x, float("nan")), y)


erfinv = in_f64(_erfinv64)
erfcinv = in_f64(_erfcinv64)


@in_f64
def normcdfinv(p):
    return _mul(_c(p, -math.sqrt(2.0)), _erfcinv64(_mul(p, _c(p, 2.0))))


@in_f64
def normcdf(x):
    return _mul(_c(x, 0.5), math_d.ErfcOp(_mul(x, _c(x, -1.0 / math.sqrt(2.0)))).result)


@in_f64
def erfcx(x):
    # exp(x^2) with x^2 = hi + lo exactly: exp(hi) * (1 + lo), lo tiny
    hi = _mul(x, x)
    lo = math_d.FmaOp(x, x, arith.NegFOp(hi).result).result
    near = _mul(_mul(math_d.ExpOp(hi).result, _add(_c(x, 1.0), lo)), math_d.ErfcOp(x).result)
    # x >= 26: 1/(x sqrt(pi)) * (1 - 1/(2x^2) + 3/(4x^4) - 15/(8x^6) + 105/(16x^8) - 945/(32x^10))
    large = ew.select(_lt(x, _c(x, 26.0)), _c(x, 26.0), x)
    inverse_square = _div(_c(x, 1.0), _mul(large, large))
    poly = _c(x, -945.0 / 32)
    for coefficient in (105.0 / 16, -15.0 / 8, 3.0 / 4, -1.0 / 2, 1.0):
        poly = _add(_mul(poly, inverse_square), _c(x, coefficient))
    far = _div(poly, _mul(large, _c(x, math.sqrt(math.pi))))
    result = ew.select(_lt(x, _c(x, 26.0)), near, far)
    return ew.select(ew.is_nan(x), x, result)


# ------------------------------------------------------------------------------------------- norms

@in_f64
def _norm(*values):
    magnitudes = [math_d.AbsFOp(v).result for v in values]
    largest = magnitudes[0]
    for m in magnitudes[1:]:
        largest = arith.MaximumFOp(largest, m).result
    safe = ew.select(ew.fcmp(arith.CmpFPredicate.OGT, largest, _c(largest, 0.0)), largest, _c(largest, 1.0))
    total = _c(largest, 0.0)
    for m in magnitudes:
        scaled = _div(m, safe)
        total = _add(total, _mul(scaled, scaled))
    result = _mul(math_d.SqrtOp(total).result, safe)
    any_inf = ew.is_inf(magnitudes[0])
    for m in magnitudes[1:]:
        any_inf = ew.either(any_inf, ew.is_inf(m))
    return ew.select(any_inf, _c(largest, float("inf")), result)


def norm(*values):
    return _norm(*values)


def rnorm(*values):
    n = _norm(*values)
    return _div(_c(n, 1.0), n)


# ------------------------------------------------------------------------------------------ rsqrt_rn

def rsqrt_rn(x):
    """f32 1/sqrt(x), correctly rounded."""
    x64 = ew.extend_float(x, F64())
    r = ew.truncate_float(_div(_c(x64, 1.0), math_d.SqrtOp(x64).result), F32())
    r64 = ew.extend_float(r, F64())
    # The exact value lies above r when r^2 x < 1; the neighbour on that side wins when it is nearer, i.e.
    # when the midpoint m between them still has m^2 x on the same side of 1.
    above = _lt(_mul(_mul(r64, r64), x64), _c(x64, 1.0))              # r^2 is exact; r^2 x within f64
    neighbour = ew.select(above, ew.next_up(r), ew.next_down(r))
    m = _mul(_add(r64, ew.extend_float(neighbour, F64())), _c(x64, 0.5))      # exact
    m2 = _mul(m, m)                                                            # exact (50 bits)
    past = math_d.FmaOp(arith.NegFOp(m2).result, x64, _c(x64, 1.0)).result   # 1 - m^2 x, sign exact
    take = ew.select(above, _lt(_c(past, 0.0), past), _lt(past, _c(past, 0.0)))
    result = ew.select(take, neighbour, r)
    special = ew.either(ew.either(ew.is_nan(x), ew.is_inf(x)), _le(x, _c(x, 0.0)))
    return ew.select(special, ew.truncate_float(_div(_c(x64, 1.0), math_d.SqrtOp(x64).result), F32()), result)
