"""tt.extern_elementwise: the functions of `libdevice` (spine/language/cpu/libdevice.py), and the fp8e4b15
casts (fp8.py). Each call names a symbol, which becomes, in this order of lookup:

    an expansion (EXPANSIONS)       arith/math ops built here: directed_rounding.py (_rz/_rd/_ru arithmetic,
                                    conversions), special_functions.py (Bessel I, erfinv, sinpi, norms,
                                    ...), bit_ops.py (clz, brev, byte_perm, ...), fp8.py
    a math-dialect op (MATH_OPS)    vectorises: the lowering replaces most with polynomials, not calls
    a C library call (LIBM)         j0f, lgammaf, hypotf, ...: a func.call per element, resolved against the
                                    C library of the process that loads the kernel

`spine.*` symbols name expansions; the operand types pick the f32 or f64 variant. The C library symbols
keep their C names, so a kernel may also name one directly.
"""
from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, func
from mlir.dialects import math as math_d

from . import bit_ops, fp8
from . import builders as b
from . import directed_rounding as dr
from . import elementwise as ew
from . import special_functions as sf
from .converter import handles

# C library symbol → math op. The libdevice module names these functions by their C symbols.
MATH_OPS = {
    "erff": "math.erf", "erf": "math.erf", "expf": "math.exp", "exp": "math.exp", "exp2f": "math.exp2",
    "expm1f": "math.expm1", "logf": "math.log", "log": "math.log", "log2f": "math.log2", "log10f": "math.log10",
    "log1pf": "math.log1p", "sqrtf": "math.sqrt", "sqrt": "math.sqrt", "rsqrtf": "math.rsqrt",
    "tanhf": "math.tanh", "tanh": "math.tanh", "sinf": "math.sin", "cosf": "math.cos", "tanf": "math.tan",
    "atanf": "math.atan", "atan2f": "math.atan2", "asinf": "math.asin", "acosf": "math.acos",
    "sinhf": "math.sinh", "coshf": "math.cosh", "powf": "math.powf", "pow": "math.powf",
    "fabsf": "math.absf", "fabs": "math.absf", "exp2": "math.exp2", "log2": "math.log2", "log10": "math.log10",
    "log1p": "math.log1p", "expm1": "math.expm1", "rsqrt": "math.rsqrt", "sin": "math.sin", "cos": "math.cos",
    "tan": "math.tan", "asin": "math.asin", "acos": "math.acos", "atan": "math.atan", "atan2": "math.atan2",
    "sinh": "math.sinh", "cosh": "math.cosh", "asinh": "math.asinh", "acosh": "math.acosh",
    "atanh": "math.atanh", "floor": "math.floor", "ceil": "math.ceil", "trunc": "math.trunc",
    "round": "math.round", "rint": "math.roundeven", "cbrt": "math.cbrt", "floorf": "math.floor", "ceilf": "math.ceil",
    "truncf": "math.trunc", "roundf": "math.round", "rintf": "math.roundeven", "cbrtf": "math.cbrt",
    "fmaf": "math.fma", "fma": "math.fma", "asinhf": "math.asinh", "acoshf": "math.acosh", "atanhf": "math.atanh",
    "erfcf": "math.erfc", "erfc": "math.erfc", "copysignf": "math.copysign", "copysign": "math.copysign",
    "fmodf": "arith.remf", "fmod": "arith.remf", "nearbyintf": "math.roundeven", "nearbyint": "math.roundeven",
}

# C library functions called as they are: symbol → (operand kinds, result kind); "f" is the float type of
# the call, "i" int32.
LIBM = {
    **{name + suffix: ("f", "f") for name in ("j0", "j1", "y0", "y1", "lgamma", "tgamma", "exp10", "logb")
       for suffix in ("f", "")},
    **{name + suffix: ("ff", "f") for name in ("remainder", "nextafter", "hypot") for suffix in ("f", "")},
    **{name + suffix: ("if", "f") for name in ("jn", "yn") for suffix in ("f", "")},
    **{name + suffix: ("fi", "f") for name in ("ldexp", "scalbn") for suffix in ("f", "")},
    "ilogbf": ("f", "i"), "ilogb": ("f", "i"),
}


def _directed(op_name: str):
    return {f"spine.{op_name}_{mode}": (lambda mode: lambda r, *xs: getattr(dr, op_name)(*xs, mode))(mode)
            for mode in dr.MODES}


def _int_to_float():
    out = {}
    for source, signed in (("int", True), ("uint", False), ("ll", True), ("ull", False)):
        for target in ("float", "double"):
            for mode in dr.MODES:
                out[f"spine.{source}2{target}_{mode}"] = (lambda signed, mode: lambda r, x: dr.int_to_float(
                    x, ew.element_of(r), signed, mode))(signed, mode)
    return out


def _float_to_int():
    out = {}
    for source in ("float", "double"):
        for target, signed in (("int", True), ("uint", False), ("ll", True), ("ull", False)):
            for mode in dr.MODES:
                out[f"spine.{source}2{target}_{mode}"] = (lambda signed, mode: lambda r, x: dr.float_to_int(
                    x, r, signed, mode))(signed, mode)
    return out


def _libm_name(base: str, x: ir.Value) -> str:
    return base + "f" if isinstance(ew.element_of(x), ir.F32Type) else base


def _powi(conv, r, x, n):
    """x^n for an integer n: the C library's pow with n as a float (math.fpowi would go through log x,
    which is NaN for negative x)."""
    exponent = arith.SIToFPOp(ew.like(n, ew.element_of(x)), n).result
    return call_libm(conv, _libm_name("pow", x), [x, exponent], x.type)


def _rhypot(conv, r, x, y):
    return arith.DivFOp(ew.const_like(x, 1.0), call_libm(conv, _libm_name("hypot", x), [x, y], x.type)).result


# symbol → builder(conv, result type, *operands), for expansions that call the C library
CALLING_EXPANSIONS = {"spine.powi": _powi, "spine.rhypot": _rhypot}


# symbol → builder(result type, *operands)
EXPANSIONS = {
    **_directed("add"), **_directed("sub"), **_directed("mul"), **_directed("div"), **_directed("rcp"),
    **_directed("sqrt"), **_directed("fma"), **_directed("narrow"), **_int_to_float(), **_float_to_int(),
    "spine.llrint": lambda r, x: dr.float_to_int(x, r, True, "rn"),
    "spine.llround": lambda r, x: dr.saturating_to_int(math_d.RoundOp(x).result, r, True),
    "spine.clz": lambda r, x: bit_ops.clz(x),
    "spine.popc": lambda r, x: bit_ops.popc(x),
    "spine.ffs": lambda r, x: bit_ops.ffs(x),
    "spine.brev": lambda r, x: bit_ops.brev(x),
    "spine.byte_perm": lambda r, x, y, s: bit_ops.byte_perm(x, y, s),
    "spine.mulhi": lambda r, a, c: bit_ops.mulhi(a, c, signed=True),
    "spine.umulhi": lambda r, a, c: bit_ops.mulhi(a, c, signed=False),
    "spine.mul24": lambda r, a, c: bit_ops.mul24(a, c, signed=True),
    "spine.umul24": lambda r, a, c: bit_ops.mul24(a, c, signed=False),
    "spine.sad": lambda r, a, c, z: bit_ops.sad(a, c, z, signed=True),
    "spine.usad": lambda r, a, c, z: bit_ops.sad(a, c, z, signed=False),
    "spine.hadd": lambda r, a, c: bit_ops.hadd(a, c, signed=True, round_up=False),
    "spine.uhadd": lambda r, a, c: bit_ops.hadd(a, c, signed=False, round_up=False),
    "spine.rhadd": lambda r, a, c: bit_ops.hadd(a, c, signed=True, round_up=True),
    "spine.urhadd": lambda r, a, c: bit_ops.hadd(a, c, signed=False, round_up=True),
    "spine.iabs": lambda r, x: math_d.AbsIOp(x).result,
    "spine.bitcast": lambda r, x: bit_ops.bitcast(x, r),
    "spine.hiloint2double": lambda r, hi, lo: bit_ops.hiloint2double(hi, lo),
    "spine.double2loint": lambda r, x: bit_ops.double2loint(x),
    "spine.double2hiint": lambda r, x: bit_ops.double2hiint(x),
    "spine.isnan": lambda r, x: bit_ops.as_int32(ew.is_nan(x)),
    "spine.isinf": lambda r, x: bit_ops.as_int32(ew.is_inf(x)),
    "spine.isfinite": lambda r, x: bit_ops.as_int32(ew.is_finite(x)),
    "spine.signbit": lambda r, x: bit_ops.signbit(x),
    "spine.saturatef": lambda r, x: bit_ops.saturatef(x),
    "spine.fdim": lambda r, x, y: bit_ops.fdim(x, y),
    "spine.rcp64h": lambda r, x: bit_ops.rcp64h(x),
    "spine.sinpi": lambda r, x: sf.sinpi(x),
    "spine.cospi": lambda r, x: sf.cospi(x),
    "spine.cyl_bessel_i0": lambda r, x: sf.cyl_bessel_i0(x),
    "spine.cyl_bessel_i1": lambda r, x: sf.cyl_bessel_i1(x),
    "spine.erfinv": lambda r, x: sf.erfinv(x),
    "spine.erfcinv": lambda r, x: sf.erfcinv(x),
    "spine.erfcx": lambda r, x: sf.erfcx(x),
    "spine.normcdf": lambda r, x: sf.normcdf(x),
    "spine.normcdfinv": lambda r, x: sf.normcdfinv(x),
    "spine.norm": lambda r, *xs: sf.norm(*xs),
    "spine.rnorm": lambda r, *xs: sf.rnorm(*xs),
    "spine.rsqrt_rn": lambda r, x: sf.rsqrt_rn(x),
    "spine.rcbrt": lambda r, x: arith.DivFOp(ew.const_like(x, 1.0), math_d.CbrtOp(x).result).result,
}


@handles("tt.extern_elementwise")
def convert_extern(conv, op):
    symbol = ir.StringAttr(op.attributes["symbol"]).value
    operands = [conv.concrete(v) for v in op.operands]
    result_type = op.results[0].type
    expansion = fp8.e4b15_expansion(symbol)
    if expansion is not None:
        value = expansion(*operands)
    elif symbol in EXPANSIONS:
        value = EXPANSIONS[symbol](result_type, *operands)
    elif symbol in CALLING_EXPANSIONS:
        value = CALLING_EXPANSIONS[symbol](conv, result_type, *operands)
    elif symbol in MATH_OPS:
        value = ir.Operation.create(MATH_OPS[symbol], results=[result_type], operands=operands).results[0]
    elif symbol in LIBM:
        value = call_libm(conv, symbol, operands, result_type)
    else:
        raise conv.unsupported(op, f"library function '{symbol}'")
    conv.bind(op.results[0], value)


def call_libm(conv, symbol: str, operands: list, result_type: ir.Type) -> ir.Value:
    """A C library call per element: directly on scalars, inside a linalg.generic on tensors."""
    scalar_types = [ew.element_of(v) for v in operands]
    scalar_result = ew.element_of(result_type)
    callee = conv.declare(symbol, scalar_types, [scalar_result])

    def call(*args):
        return func.CallOp([scalar_result], ir.FlatSymbolRefAttr.get(callee), list(args)).results[0]
    if not isinstance(result_type, ir.RankedTensorType):
        return call(*operands)
    shape = list(ir.RankedTensorType(result_type).shape)
    rank = len(shape)
    out = b.empty(shape, scalar_result)
    op = b.generic([result_type], operands, [out], [b.identity_map(rank)] * (len(operands) + 1), rank,
                   lambda *args: [call(*args[:-1])])
    return op.results[0]
