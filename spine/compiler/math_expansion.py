"""Vectorisable f32 math: exp, log, log2, erf, tanh, sin, cos and powf as arith/math ops.

Upstream lowers these to llvm intrinsics or libm calls, which become scalar `expf`/`logf`/... calls in the
loop on RISC-V (LLVM has no vector math library there) and on x86 too: the loop does not vectorise. MLIR's
own polynomial approximations are not exposed as a pass in the Python bindings we pin, hence these
rewrites. Runs after loops were formed, on scalar ops (f16/bf16 arrive widened to f32); sinh, cosh, asinh
and friends reach it through math-expand-ops. f64 math is left to the C library.

    exp     f32: Cody-Waite range reduction (k rounded by a magic-number addition, no conversions), a
            degree-6 minimax polynomial (Cephes expf coefficients, about 1 ulp; see expand_math), scaling
            by 2^k in two steps so that results down to the subnormal range stay exact (AVX-512: one
            vscalefps, through llvm.ldexp). Inputs outside [-104, 88.7] are replaced at the end
            rather than clamped at the start: the polynomial's chain of dependent operations is what
            limits a vectorised loop, so it is kept short
    erf     f32: x + x P(x^2) below 1 (fused, one rounding); 1 - exp(R(|x| - 2.3) - x^2) up to 3.95, with R
            a fit of log(erfc(x)) + x^2, smooth where log(erfc) itself is not; 1 beyond: about 1.2 ulp.
            Both fits minimise the error in ulps of erf (iteratively reweighted least squares), so R is
            weighted by erfc(x), the factor by which an error in the exponent reaches the result:
            five degrees suffice where an unweighted fit of log(erfc) took eleven
    log, log2, tanh, sin, cos, powf
            f32 computed in f64 and rounded once: log from the exponent bits and 2 atanh(s) of the
            mantissa's s = (m - 1)/(m + 1) (a series in s^2), exp by reduction to |r| <= ln2/2 and a Taylor
            series, sin/cos by Payne and Hanek's reduction by pi/2 (in f64 chunks of 2/pi, so for every
            f32 up to 2^128) and Taylor series on |r| <= pi/4.
            Every series is truncated where its next term is below 2^-45 relative: the one rounding to
            f32 decides the result (within 1 ulp).
"""
from __future__ import annotations

import math as pymath

from mlir import ir
from mlir.dialects import arith, llvm, math

from ..ir_walk import collect_ops

LOG2E = 1.44269504088896341
LN2_HI = 0.693359375
LN2_LO = -2.12194440e-4
POLY = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1)
MIN_INPUT = -104.0              # below this exp underflows to 0 even as a subnormal
OVERFLOW_INPUT = 89.0           # above log(FLT_MAX) = 88.7228, where k = 128 and y >= 1: the steps give inf
ROUNDING_MAGIC = 12582912.0     # 1.5 * 2^23
ROUNDING_MAGIC_BITS = 0x4B400000

# erf(x) = x + x * ERF_SMALL(x^2) on |x| < 1; erf(x) = 1 - exp(ERF_LARGE(|x| - ERF_CENTER) - x^2) on [1, 3.95]
ERF_SMALL = (0.12837916595504145, -0.37612627441504304, 0.11283601563591693, -0.02685439207259596,
             0.005189254695014058, -0.0008017093805799151, 7.873351904125887e-05)
ERF_CENTER = 2.3
ERF_LARGE = (-1.4839314633304752, -0.3764580800400879, 0.06302085795528946, -0.013532954920789054,
             0.0015481256775052926, -0.0011504654936616413)
# e^r = 1 + r + r^2 ERF_EXP(r) on |r| <= ln2/2 to 3e-9 relative: one degree less than exp's POLY (the
# same weighted fit), enough for erf's tail, where exp's error is scaled by erfc(x) <= 0.16
ERF_EXP = (0.49999993449648406, 0.16666520682029695, 0.04166838806171303, 0.00836871100727641,
           0.0013814566784272697)
ERF_SATURATED = 3.95            # erfc(3.95) < 2^-25: erf rounds to 1

def _two_over_pi_bits(bits: int) -> int:
    """floor(2/pi * 2^bits), from Machin's formula pi = 16 atan(1/5) - 4 atan(1/239) in integers."""
    guard = bits + 32
    one = 1 << guard

    def atan_inverse(n: int) -> int:
        total, term, k, sign = 0, one // n, 1, 1
        while term:
            total += sign * (term // k)
            term //= n * n
            k += 2
            sign = -sign
        return total
    pi = 16 * atan_inverse(5) - 4 * atan_inverse(239)
    return (2 << (guard + bits)) // pi


CHUNK_BITS = 24                 # times an f32's 24 significant bits: exact in f64
CHUNKS = 9                      # 2/pi to 2^-216: the bits an f32 up to 2^128 needs, and 60 more
_BITS = _two_over_pi_bits(CHUNK_BITS * CHUNKS)
TWO_OVER_PI_CHUNKS = tuple(
    ((_BITS >> (CHUNK_BITS * (CHUNKS - 1 - i))) & ((1 << CHUNK_BITS) - 1)) * 2.0 ** (-CHUNK_BITS * (i + 1))
    for i in range(CHUNKS))


def _f32() -> ir.Type:
    return ir.F32Type.get()


def _f64() -> ir.Type:
    return ir.F64Type.get()


def _c(ty: ir.Type, value) -> ir.Value:
    if isinstance(ty, ir.IntegerType):
        return arith.ConstantOp(ty, value).result
    return arith.ConstantOp(ty, float(value)).result


def _f(value: float) -> ir.Value:
    return _c(_f32(), value)


def _i(value: int) -> ir.Value:
    return _c(ir.IntegerType.get_signless(32), value)


def _add(a, b): return arith.AddFOp(a, b).result
def _sub(a, b): return arith.SubFOp(a, b).result
def _mul(a, b): return arith.MulFOp(a, b).result
def _div(a, b): return arith.DivFOp(a, b).result


def _fma(a, b, c):
    op = math.FmaOp(a, b, c)
    op.operation.attributes[SPLITTABLE] = ir.UnitAttr.get()
    return op.result


def _sel(c, a, b): return arith.SelectOp(c, a, b).result
def _cmp(pred, a, b): return arith.CmpFOp(getattr(arith.CmpFPredicate, pred), a, b).result


def _horner(x: ir.Value, coefficients) -> ir.Value:
    """coefficients[0] + coefficients[1] x + ... with fused multiply-adds."""
    p = _c(x.type, coefficients[-1])
    for c in reversed(coefficients[:-1]):
        p = _fma(p, x, _c(x.type, c))
    return p


def _estrin(x: ir.Value, coefficients) -> ir.Value:
    """The same polynomial as _horner, evaluated as pairs (c0 + c1 x) + x^2 (c2 + c3 x) + x^4 (...): about
    half the chain of dependent multiply-adds, for the same count."""
    terms = [_fma(_c(x.type, coefficients[i + 1]), x, _c(x.type, coefficients[i])) if i + 1 < len(coefficients)
             else _c(x.type, coefficients[i]) for i in range(0, len(coefficients), 2)]
    power = _mul(x, x)
    while len(terms) > 1:
        terms = [_fma(power, terms[i + 1], terms[i]) if i + 1 < len(terms) else terms[i]
                 for i in range(0, len(terms), 2)]
        if len(terms) > 1:
            power = _mul(power, power)
    return terms[0]


def _round(x: ir.Value) -> ir.Value:
    return math.FloorOp(_add(x, _c(x.type, 0.5))).result


def _pow2(k: ir.Value) -> ir.Value:
    """2^k as f32 for integer k in [-126, 127], built from the exponent bits."""
    bits = arith.ShLIOp(arith.AddIOp(k, _i(127)).result, _i(23)).result
    return arith.BitcastOp(_f32(), bits).result


def _widen(x): return arith.ExtFOp(_f64(), x).result
def _narrow(x): return arith.TruncFOp(_f32(), x).result
def _is_nan(x): return _cmp("UNO", x, x)


# ----------------------------------------------------------------------------------------- f32 exp

def _reduced_exp(x: ir.Value, magic: float, ln2_parts, coefficients, poly) -> tuple:
    """(shifted, y) with e^x = y 2^k: k = round(x log2 e) by adding `magic` (1.5 * 2^23, plus anything the
    caller wants in the low bits beside k), which leaves k in shifted's low bits (|k| < 2^22 for the inputs
    whose result is computed), with no float to integer conversion (each a rounding-mode switch on RISC-V);
    r = x - k ln 2, by ln 2 in `ln2_parts`; y = 1 + r + r^2 P(r)."""
    shifted = _fma(x, _f(LOG2E), _f(magic))
    k = _sub(shifted, _f(magic))
    r = x
    for part in ln2_parts:
        r = _fma(k, _f(-part), r)
    y = _add(_fma(poly(r, coefficients), _mul(r, r), r), _f(1.0))
    return shifted, y


def expand_exp(x: ir.Value, poly=_horner, ldexp: bool = False, special_cases: bool = True) -> ir.Value:
    """e^x. `special_cases`: inputs outside [-104, 88.7] get their results (inf, 0); without, x must
    lie inside. NaN gives NaN either way."""
    if special_cases:
        # Clamped to inputs whose results the steps compute as inf and 0, as every input beyond has them.
        # The comparisons are false for NaN, which passes. On x86 each select is one minps/maxps, where
        # replacing the results after took a comparison and a masked move each.
        x = _sel(_cmp("OGT", x, _f(OVERFLOW_INPUT)), _f(OVERFLOW_INPUT), x)
        x = _sel(_cmp("OLT", x, _f(MIN_INPUT)), _f(MIN_INPUT), x)
    shifted, y = _reduced_exp(x, ROUNDING_MAGIC, (LN2_HI, LN2_LO), POLY[::-1], poly)
    ki = arith.SubIOp(arith.BitcastOp(ir.IntegerType.get_signless(32), shifted).result,
                      _i(ROUNDING_MAGIC_BITS)).result
    if ldexp:
        result = llvm.intr_ldexp(_f32(), y, ki)
    else:
        k1 = arith.ShRSIOp(ki, _i(1)).result
        k2 = arith.SubIOp(ki, k1).result
        result = _mul(_mul(y, _pow2(k1)), _pow2(k2))
    return result


def _exp_of_erfc(x: ir.Value) -> ir.Value:
    """e^x for x in [-17.6, -0.8], as erf's tail needs it: the steps of expand_exp less what that range
    and that use cannot tell apart. 2^k is normal, so one multiplication by it scales exactly; one rounded
    ln 2 reduces with a relative error of |k| 2e-9, and the polynomial is a degree shorter."""
    # The magic number carries the exponent bias: shifted's bits are ROUNDING_MAGIC_BITS + 127 + k, whose
    # low 9 bits (ROUNDING_MAGIC_BITS has none set) are k + 127, so 2^k is those bits shifted into place.
    shifted, y = _reduced_exp(x, ROUNDING_MAGIC + 127, (pymath.log(2.0),), ERF_EXP, _horner)
    bits = arith.BitcastOp(ir.IntegerType.get_signless(32), shifted).result
    return _mul(y, arith.BitcastOp(_f32(), arith.ShLIOp(bits, _i(23)).result).result)


# ----------------------------------------------------------------------------------------- f32 erf

def expand_erf(x: ir.Value) -> ir.Value:
    # Horner's form, unlike exp's choice for out-of-order cores: the two branches are independent chains
    # already, and with Estrin's extra products and register copies (57 instructions a vector, not 46)
    # GELU ran no faster on x86-64 (its median time 7-10 % slower).
    a = math.AbsFOp(x).result
    small = _fma(x, _horner(_mul(x, x), ERF_SMALL), x)
    # Clamped, so that the exponent stays in [-17.6, -0.8] on every lane: no overflow, underflow or NaN
    # for exp to handle (lanes below 1 are discarded by the select; NaN passes through the minimum).
    m = arith.MinimumFOp(a, _f(ERF_SATURATED)).result
    exponent = _fma(arith.NegFOp(m).result, m, _horner(_sub(m, _f(ERF_CENTER)), ERF_LARGE))
    large = _sub(_f(1.0), _exp_of_erfc(exponent))
    return _sel(_cmp("OLT", a, _f(1.0)), small, math.CopySignOp(large, x).result)


# ------------------------------------------------------------------------------------ f64 helpers

def _exp64(t: ir.Value) -> ir.Value:
    """e^t in f64 to about 2^-50 relative for results an f32 can hold; t clamped to [-200, 200] (the f32
    rounding of the result then gives 0 or inf as it should); NaN stays NaN."""
    f64 = _f64()
    t = arith.MinimumFOp(arith.MaximumFOp(t, _c(f64, -200.0)).result, _c(f64, 200.0)).result
    k = _round(_mul(t, _c(f64, LOG2E)))
    r = _sub(t, _mul(k, _c(f64, 0.6931471803691238)))            # ln2's first 32 bits: exact product
    r = _sub(r, _mul(k, _c(f64, 1.9082149292705877e-10)))        # |r| <= 0.35
    p = _horner(r, [1.0 / pymath.factorial(n) for n in range(13)])
    i64 = ir.IntegerType.get_signless(64)
    bits = arith.ShLIOp(arith.AddIOp(arith.FPToSIOp(i64, k).result, _c(i64, 1023)).result, _c(i64, 52)).result
    return _mul(p, arith.BitcastOp(f64, bits).result)


def _log64(v: ir.Value) -> ir.Value:
    """log(v) in f64 for finite normal v > 0, to about 2^-50 relative."""
    f64, i64 = _f64(), ir.IntegerType.get_signless(64)
    bits = arith.BitcastOp(i64, v).result
    e = arith.SubIOp(arith.ShRUIOp(bits, _c(i64, 52)).result, _c(i64, 1023)).result
    mantissa_bits = arith.OrIOp(arith.AndIOp(bits, _c(i64, (1 << 52) - 1)).result, _c(i64, 1023 << 52)).result
    m = arith.BitcastOp(f64, mantissa_bits).result                      # [1, 2)
    high = _cmp("OGT", m, _c(f64, pymath.sqrt(2.0)))
    m = _sel(high, _mul(m, _c(f64, 0.5)), m)                            # [sqrt(1/2), sqrt(2)]
    ef = arith.SIToFPOp(f64, e).result
    ef = _sel(high, _add(ef, _c(f64, 1.0)), ef)
    s = _div(_sub(m, _c(f64, 1.0)), _add(m, _c(f64, 1.0)))             # |s| <= 0.1716
    z = _mul(s, s)
    series = _horner(z, [2.0 / (2 * n + 1) for n in range(9)])
    return _fma(ef, _c(f64, pymath.log(2.0)), _mul(s, series))


# --------------------------------------------------------------------------------- log, log2 (f32)

def _log_special(x: ir.Value, value: ir.Value) -> ir.Value:
    """log's special cases around `value` (an f32 log of x for finite x > 0)."""
    value = _sel(_cmp("OEQ", x, _f(0.0)), _f(float("-inf")), value)
    value = _sel(_cmp("OEQ", x, _f(float("inf"))), x, value)
    value = _sel(_cmp("OLT", x, _f(0.0)), _f(float("nan")), value)
    return _sel(_is_nan(x), x, value)


def _positive_finite64(x: ir.Value) -> ir.Value:
    """x widened to f64, with values log cannot take (<= 0, inf, NaN) replaced by 1."""
    ok = arith.AndIOp(_cmp("OGT", x, _f(0.0)), _cmp("OLT", x, _f(float("inf")))).result
    return _widen(_sel(ok, x, _f(1.0)))


def expand_log(x: ir.Value) -> ir.Value:
    return _log_special(x, _narrow(_log64(_positive_finite64(x))))


def expand_log2(x: ir.Value) -> ir.Value:
    return _log_special(x, _narrow(_mul(_log64(_positive_finite64(x)), _c(_f64(), 1.0 / pymath.log(2.0)))))


# ---------------------------------------------------------------------------------------- tanh (f32)

TANH_SERIES_LIMIT = 0.125


def expand_tanh(x: ir.Value) -> ir.Value:
    f64 = _f64()
    a = math.AbsFOp(_widen(x)).result
    # 1 - 2 / (e^(2a) + 1); below the limit its cancellation would cost bits: Taylor series there.
    far = _sub(_c(f64, 1.0), _div(_c(f64, 2.0), _add(_exp64(_mul(a, _c(f64, 2.0))), _c(f64, 1.0))))
    z = _mul(a, a)
    taylor = (1.0, -1.0 / 3, 2.0 / 15, -17.0 / 315, 62.0 / 2835, -1382.0 / 155925, 21844.0 / 6081075,
              -929569.0 / 638512875)
    near = _mul(a, _horner(z, taylor))
    result = _narrow(_sel(_cmp("OLT", a, _c(f64, TANH_SERIES_LIMIT)), near, far))
    result = math.CopySignOp(result, x).result
    return _sel(_is_nan(x), x, result)


# ------------------------------------------------------------------------------------- sin, cos (f32)

SIN_TAYLOR = [(-1.0) ** n / pymath.factorial(2 * n + 1) for n in range(9)]   # in r^2, times r
COS_TAYLOR = [(-1.0) ** n / pymath.factorial(2 * n) for n in range(10)]      # in r^2


def _two_sum(a: ir.Value, b: ir.Value):
    """(s, e) with s = fl(a + b) and a + b = s + e exactly (Knuth)."""
    total = _add(a, b)
    b_virtual = _sub(total, a)
    a_virtual = _sub(total, b_virtual)
    return total, _add(_sub(a, a_virtual), _sub(b, b_virtual))


def _quadrant_and_remainder(x: ir.Value):
    """x = (k + f) pi/2 with k mod 4 (i64) and f in [-1/2, 1/2] (f64, to about 2^-100 absolute, so that f
    keeps its full precision however close x comes to a multiple of pi/2): Payne and Hanek's reduction.
    Each product x * chunk of 2/pi is exact; its remainder mod 4 (in [-2, 2]) is exact; the remainders
    are summed in double-double."""
    f64, i64 = _f64(), ir.IntegerType.get_signless(64)
    v = _widen(x)
    high, low = _c(f64, 0.0), _c(f64, 0.0)
    for chunk in TWO_OVER_PI_CHUNKS:
        t = _mul(v, _c(f64, chunk))
        t = _sub(t, _mul(_c(f64, 4.0), _round(_mul(t, _c(f64, 0.25)))))   # exact, and small t kept as it is
        high, error = _two_sum(high, t)
        low = _add(low, error)
    high, low = _two_sum(high, low)
    k = _round(high)
    f = _add(_sub(high, k), low)
    quadrant = arith.AndIOp(arith.FPToSIOp(i64, k).result, _c(i64, 3)).result
    return quadrant, _mul(f, _c(f64, pymath.pi / 2))


def _sin_cos_of(r: ir.Value):
    z = _mul(r, r)
    return _mul(r, _horner(z, SIN_TAYLOR)), _horner(z, COS_TAYLOR)


def _pick(quadrant: ir.Value, choices) -> ir.Value:
    i64 = ir.IntegerType.get_signless(64)
    result = choices[3]
    for q in (2, 1, 0):
        result = _sel(arith.CmpIOp(arith.CmpIPredicate.eq, quadrant, _c(i64, q)).result, choices[q], result)
    return result


def _sin_or_cos(x: ir.Value, shift: int) -> ir.Value:
    quadrant, r = _quadrant_and_remainder(x)
    s, c = _sin_cos_of(r)
    i64 = ir.IntegerType.get_signless(64)
    quadrant = arith.AndIOp(arith.AddIOp(quadrant, _c(i64, shift)).result, _c(i64, 3)).result
    neg_s, neg_c = arith.NegFOp(s).result, arith.NegFOp(c).result
    result = _narrow(_pick(quadrant, (s, c, neg_s, neg_c)))
    finite = _cmp("OLT", math.AbsFOp(x).result, _f(float("inf")))
    return _sel(finite, result, _f(float("nan")))


def expand_sin(x: ir.Value) -> ir.Value:
    return _sin_or_cos(x, 0)


def expand_cos(x: ir.Value) -> ir.Value:
    return _sin_or_cos(x, 1)


# -------------------------------------------------------------------------------------- powf (f32)

def expand_powf(a: ir.Value, b: ir.Value) -> ir.Value:
    """a^b as C's powf: exp(b log|a|) in f64, signed for negative a and odd integer b."""
    f64 = _f64()
    a64, b64 = _widen(a), _widen(b)
    magnitude = math.AbsFOp(a64).result
    usable = arith.AndIOp(_cmp("OGT", magnitude, _c(f64, 0.0)),
                          _cmp("OLT", magnitude, _c(f64, float("inf")))).result
    log_a = _log64(_sel(usable, magnitude, _c(f64, 1.0)))
    log_a = _sel(_cmp("OEQ", magnitude, _c(f64, 0.0)), _c(f64, float("-inf")), log_a)
    log_a = _sel(_cmp("OEQ", magnitude, _c(f64, float("inf"))), magnitude, log_a)
    t = _mul(b64, log_a)
    t = _sel(_is_nan(magnitude), magnitude, t)
    result = _narrow(_exp64(t))
    # inf * 0 cases: |a| == 1 (b infinite) and b == 0 give 1
    integer = _cmp("OEQ", math.FloorOp(b).result, b)                    # true for infinities
    half = _mul(b, _f(0.5))
    odd = arith.AndIOp(integer, _cmp("ONE", math.FloorOp(half).result, half)).result
    negative = _cmp("OLT", a, _f(0.0))
    result = _sel(arith.AndIOp(negative, odd).result, arith.NegFOp(result).result, result)
    # -0 with odd integer b keeps its sign (zero or infinity)
    i32 = ir.IntegerType.get_signless(32)
    sign = arith.CmpIOp(arith.CmpIPredicate.slt, arith.BitcastOp(i32, a).result, _i(0)).result
    negative_zero = arith.AndIOp(_cmp("OEQ", a, _f(0.0)), sign).result
    result = _sel(arith.AndIOp(negative_zero, odd).result, arith.NegFOp(result).result, result)
    finite_a = _cmp("OLT", math.AbsFOp(a).result, _f(float("inf")))
    invalid = arith.AndIOp(arith.AndIOp(negative, finite_a).result,
                           arith.XOrIOp(integer, _c(ir.IntegerType.get_signless(1), 1)).result).result
    result = _sel(invalid, _f(float("nan")), result)
    result = _sel(_is_nan(b), b, result)
    result = _sel(_cmp("OEQ", a, _f(1.0)), _f(1.0), result)
    result = _sel(_cmp("OEQ", math.AbsFOp(a).result, _f(1.0)),
                  _sel(_cmp("OEQ", math.AbsFOp(b).result, _f(float("inf"))), _f(1.0), result), result)
    return _sel(_cmp("OEQ", b, _f(0.0)), _f(1.0), result)


POLYNOMIAL = ("math.exp",)   # the expansions whose polynomials' form expand_math chooses
UNARY = {"math.exp": expand_exp, "math.erf": expand_erf, "math.log": expand_log, "math.log2": expand_log2,
         "math.tanh": expand_tanh, "math.sin": expand_sin, "math.cos": expand_cos}
BINARY = {"math.powf": expand_powf}


# Marks the expansions' own multiply-adds. They are fused where the CPU has FMA instructions, and a multiply
# and an add where it has not (x86 before Haswell and Piledriver): an exact math.fma there is a call of the C
# library's fmaf per element. Each algorithm above stays within its bound either way; the fused
# multiply-adds of other ops (directed rounding, error-free products) need their one rounding and are never
# split.
SPLITTABLE = "spine.splittable_fma"


def expand_math(module, short_chains: bool = False, ldexp: bool = False, fused: bool = True) -> None:
    """Replace every scalar f32 math op listed in UNARY and BINARY by its expansion.

    `short_chains`: evaluate exp's polynomial in Estrin's form, for out-of-order cores, where a vectorised
    loop of exp is limited by its chain of dependent operations (softmax 15-20 % faster on x86-64);
    otherwise in Horner's, the fewest instructions.
    `ldexp`: exp scales its result by 2^k with llvm.ldexp (AVX-512's vscalefps: one instruction, one
    rounding into the subnormal range) instead of two multiplications by powers of two built from bits.
    `fused`: the target has fused multiply-add instructions; without, the expansions multiply and add."""
    poly = _estrin if short_chains else _horner

    def scalar_f32_math(op) -> bool:
        return (op.name in UNARY or op.name in BINARY) and isinstance(op.results[0].type, ir.F32Type)
    for op in collect_ops(module, scalar_f32_math):
        name = op.name
        with ir.InsertionPoint(op), op.location:
            if name in POLYNOMIAL:
                value = UNARY[name](*op.operands, poly, ldexp)
            else:
                value = (UNARY[name] if name in UNARY else BINARY[name])(*op.operands)
        op.results[0].replace_all_uses_with(value)
        op.erase()
    for op in collect_ops(module, lambda op: op.name == "math.fma" and SPLITTABLE in op.attributes):
        if fused:
            del op.attributes[SPLITTABLE]
            continue
        with ir.InsertionPoint(op), op.location:
            a, b, c = op.operands
            op.results[0].replace_all_uses_with(_add(_mul(a, b), c))
        op.erase()
