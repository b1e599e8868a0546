"""Math functions for kernels on CPUs: `triton.language.extra.libdevice` (which the backend maps to this
module) and `triton.language.extra.cpu.libdevice`.

Every function of triton's libdevice API is here, with the argument and result types of its CUDA
counterpart. Each is a `tt.extern_elementwise` naming a symbol, which the conversion (to_linalg/extern.py)
turns into a math-dialect op where MLIR has one (they vectorise), an expansion into arith/math ops
(rounding modes, Bessel I, erfinv, bit manipulation, ...; symbols `spine.*`), or a call into the C library
(j0f, lgammaf, ...). fp16/bf16 arguments of float functions are computed in fp32 and the result converted
back, as on GPUs. The `fast_*` functions are the accurate ones: a CPU has no faster approximations.
"""
from triton.language import core

_HALF = (core.float16, core.bfloat16)
_FLOAT_TYPES = ("fp32", "fp64")
MODES = ("rn", "rz", "rd", "ru")


def _extern(name: str, overloads, to_bool: bool = False):
    """A libdevice function: `overloads` lists (argument dtype names, result dtype name, symbol)."""
    table = {tuple(core.dtype(a) for a in args): (symbol, core.dtype(result)) for args, result, symbol in overloads}
    takes_fp32 = {i for args in table for i, a in enumerate(args) if a == core.float32}

    @core.extern
    def fn(*args, _semantic=None):
        args = [_semantic.to_tensor(a) for a in args]
        narrow = None
        for i, a in enumerate(args):
            if a.dtype in _HALF and i in takes_fp32:
                narrow = a.dtype
                args[i] = a.to(core.float32, _semantic=_semantic)
        result = core.extern_elementwise("", "", args, table, is_pure=True, _semantic=_semantic)
        if to_bool:
            return result.to(core.int1, _semantic=_semantic)
        if narrow is not None and result.dtype.is_floating():
            result = result.to(narrow, _semantic=_semantic)
        return result
    fn.__name__ = fn.__qualname__ = name
    return fn


def _float(name: str, f32_symbol: str, f64_symbol: str, arity: int = 1, result=None):
    """Float arguments of one type; the result of that type (or `result`)."""
    return _extern(name, [((t, ) * arity, result or t, symbol)
                          for t, symbol in zip(_FLOAT_TYPES, (f32_symbol, f64_symbol)) if symbol])


def _spine(name: str, arity: int = 1, symbol: str = None, result=None, to_bool: bool = False, types=_FLOAT_TYPES):
    """An expansion (symbol `spine.<name>`) over float arguments."""
    symbol = symbol or f"spine.{name}"
    return _extern(name, [((t, ) * arity, result or t, symbol) for t in types], to_bool=to_bool)


def _c(name: str, arity: int = 1):
    """A C library function (or one that is a math op): `<name>f` for f32, `<name>` for f64."""
    return _float(name, name + "f", name, arity)


def _converts(prefix: str, source: str, result: str):
    """The four rounding modes of one conversion, e.g. float2int_rn ... float2int_ru."""
    return {f"{prefix}_{m}": _extern(f"{prefix}_{m}", [((source, ), result, f"spine.{prefix}_{m}")]) for m in MODES}


def _rounded(op: str, arity: int):
    """add_rn ... add_ru and the like: the operation rounded in each mode."""
    return {f"{op}_{m}": _spine(f"{op}_{m}", arity) for m in MODES}


# ------------------------------------------------------------------------------------- math functions

erf = _c("erf")
erfc = _c("erfc")
exp = _c("exp")
exp2 = _c("exp2")
exp10 = _c("exp10")
expm1 = _c("expm1")
log = _c("log")
log2 = _c("log2")
log10 = _c("log10")
log1p = _c("log1p")
logb = _c("logb")
sqrt = _c("sqrt")
rsqrt = _c("rsqrt")
cbrt = _c("cbrt")
sin = _c("sin")
cos = _c("cos")
tan = _c("tan")
asin = _c("asin")
acos = _c("acos")
atan = _c("atan")
sinh = _c("sinh")
cosh = _c("cosh")
tanh = _c("tanh")
asinh = _c("asinh")
acosh = _c("acosh")
atanh = _c("atanh")
atan2 = _c("atan2", 2)
hypot = _c("hypot", 2)
floor = _c("floor")
ceil = _c("ceil")
trunc = _c("trunc")
round = _c("round")
rint = _c("rint")
nearbyint = _c("nearbyint")
fabs = _c("fabs")
copysign = _c("copysign", 2)
fmod = _c("fmod", 2)
remainder = _c("remainder", 2)
nextafter = _c("nextafter", 2)
fma = _c("fma", 3)
lgamma = _c("lgamma")
tgamma = _c("tgamma")
j0 = _c("j0")
j1 = _c("j1")
y0 = _c("y0")
y1 = _c("y1")
jn = _extern("jn", [(("int32", t), t, s) for t, s in zip(_FLOAT_TYPES, ("jnf", "jn"))])
yn = _extern("yn", [(("int32", t), t, s) for t, s in zip(_FLOAT_TYPES, ("ynf", "yn"))])
ldexp = _extern("ldexp", [((t, "int32"), t, s) for t, s in zip(_FLOAT_TYPES, ("ldexpf", "ldexp"))])
scalbn = _extern("scalbn", [((t, "int32"), t, s) for t, s in zip(_FLOAT_TYPES, ("scalbnf", "scalbn"))])
ilogb = _float("ilogb", "ilogbf", "ilogb", result="int32")
pow = _extern("pow", [(("fp32", "int32"), "fp32", "spine.powi"), (("fp64", "int32"), "fp64", "spine.powi"),
                      (("fp32", "fp32"), "fp32", "powf"), (("fp64", "fp64"), "fp64", "pow")])

sinpi = _spine("sinpi")
cospi = _spine("cospi")
rcbrt = _spine("rcbrt")
rhypot = _spine("rhypot", 2)
norm3d = _spine("norm3d", 3, symbol="spine.norm")
rnorm3d = _spine("rnorm3d", 3, symbol="spine.rnorm")
norm4d = _spine("norm4d", 4, symbol="spine.norm")
rnorm4d = _spine("rnorm4d", 4, symbol="spine.rnorm")
cyl_bessel_i0 = _spine("cyl_bessel_i0")
cyl_bessel_i1 = _spine("cyl_bessel_i1")
erfinv = _spine("erfinv")
erfcinv = _spine("erfcinv")
erfcx = _spine("erfcx")
normcdf = _spine("normcdf")
normcdfinv = _spine("normcdfinv")
fdim = _spine("fdim", 2)
saturatef = _spine("saturatef", types=("fp32", ))
rcp64h = _spine("rcp64h", types=("fp64", ))
rsqrt_rn = _spine("rsqrt_rn", types=("fp32", ))
llrint = _spine("llrint", result="int64")
llround = _spine("llround", result="int64")
isnan = _spine("isnan", result="int32", to_bool=True)
isinf = _spine("isinf", result="int32", to_bool=True)
finitef = _spine("finitef", symbol="spine.isfinite", result="int32", to_bool=True, types=("fp32", ))
isfinited = _spine("isfinited", symbol="spine.isfinite", result="int32", to_bool=True, types=("fp64", ))
signbit = _spine("signbit", result="int32")

# The fast_* variants: a CPU has no cheaper approximations than the functions themselves.
fast_sinf = _float("fast_sinf", "sinf", None)
fast_cosf = _float("fast_cosf", "cosf", None)
fast_tanf = _float("fast_tanf", "tanf", None)
fast_tanhf = _float("fast_tanhf", "tanhf", None)
fast_expf = _float("fast_expf", "expf", None)
fast_exp10f = _float("fast_exp10f", "exp10f", None)
fast_logf = _float("fast_logf", "logf", None)
fast_log2f = _float("fast_log2f", "log2f", None)
fast_log10f = _float("fast_log10f", "log10f", None)
fast_powf = _float("fast_powf", "powf", None, 2)
fast_dividef = _extern("fast_dividef", [(("fp32", "fp32"), "fp32", "spine.div_rn")])

# ------------------------------------------------------------------------- rounding modes, conversions

globals().update(_rounded("add", 2))
globals().update(_rounded("sub", 2))
globals().update(_rounded("mul", 2))
globals().update(_rounded("div", 2))
globals().update(_rounded("fma", 3))
globals().update(_rounded("rcp", 1))
globals().update(_rounded("sqrt", 1))
globals().update({f"double2float_{m}": _extern(f"double2float_{m}", [(("fp64", ), "fp32", f"spine.narrow_{m}")])
                  for m in MODES})
for _source, _name in (("fp32", "float"), ("fp64", "double")):
    globals().update(_converts(f"{_name}2int", _source, "int32"))
    globals().update(_converts(f"{_name}2uint", _source, "int32"))
    globals().update(_converts(f"{_name}2ll", _source, "int64"))
    globals().update(_converts(f"{_name}2ull", _source, "int64"))
globals().update(_converts("int2float", "int32", "fp32"))
globals().update(_converts("uint2float", "uint32", "fp32"))
globals().update(_converts("ll2float", "int64", "fp32"))
globals().update(_converts("ull2float", "uint64", "fp32"))
globals().update(_converts("ll2double", "int64", "fp64"))
globals().update(_converts("ull2double", "uint64", "fp64"))
int2double_rn = _extern("int2double_rn", [(("int32", ), "fp64", "spine.int2double_rn")])
uint2double_rn = _extern("uint2double_rn", [(("uint32", ), "fp64", "spine.uint2double_rn")])

# --------------------------------------------------------------------------------- bits and integers

int_as_float = _extern("int_as_float", [(("int32", ), "fp32", "spine.bitcast")])
uint_as_float = _extern("uint_as_float", [(("uint32", ), "fp32", "spine.bitcast")])
float_as_int = _extern("float_as_int", [(("fp32", ), "int32", "spine.bitcast")])
float_as_uint = _extern("float_as_uint", [(("fp32", ), "int32", "spine.bitcast")])
longlong_as_double = _extern("longlong_as_double", [(("int64", ), "fp64", "spine.bitcast")])
double_as_longlong = _extern("double_as_longlong", [(("fp64", ), "int64", "spine.bitcast")])
hiloint2double = _extern("hiloint2double", [(("int32", "int32"), "fp64", "spine.hiloint2double")])
double2loint = _extern("double2loint", [(("fp64", ), "int32", "spine.double2loint")])
double2hiint = _extern("double2hiint", [(("fp64", ), "int32", "spine.double2hiint")])

clz = _extern("clz", [(("int32", ), "int32", "spine.clz"), (("int64", ), "int32", "spine.clz")])
popc = _extern("popc", [(("int32", ), "int32", "spine.popc"), (("int64", ), "int32", "spine.popc")])
ffs = _extern("ffs", [(("int32", ), "int32", "spine.ffs"), (("int64", ), "int32", "spine.ffs")])
brev = _extern("brev", [(("int32", ), "int32", "spine.brev"), (("int64", ), "int64", "spine.brev")])
byte_perm = _extern("byte_perm", [(("int32", "int32", "int32"), "int32", "spine.byte_perm")])
mulhi = _extern("mulhi", [(("int32", "int32"), "int32", "spine.mulhi"), (("uint32", "uint32"), "uint32", "spine.umulhi"),
                          (("int64", "int64"), "int64", "spine.mulhi"), (("uint64", "uint64"), "uint64", "spine.umulhi")])
mul24 = _extern("mul24", [(("int32", "int32"), "int32", "spine.mul24"),
                          (("uint32", "uint32"), "uint32", "spine.umul24")])
sad = _extern("sad", [(("int32", "int32", "uint32"), "int32", "spine.sad"),
                      (("uint32", "uint32", "uint32"), "uint32", "spine.usad")])
hadd = _extern("hadd", [(("int32", "int32"), "int32", "spine.hadd"), (("uint32", "uint32"), "uint32", "spine.uhadd")])
rhadd = _extern("rhadd", [(("int32", "int32"), "int32", "spine.rhadd"),
                          (("uint32", "uint32"), "uint32", "spine.urhadd")])
abs = _extern("abs", [(("int32", ), "int32", "spine.iabs"), (("int64", ), "int64", "spine.iabs"),
                      (("fp32", ), "fp32", "fabsf"), (("fp64", ), "fp64", "fabs")])


@core.extern
def silu(arg0, _semantic=None):
    """x * sigmoid(x) = x / (1 + exp(-x)); fp16/bf16 are computed in fp32 (spine-triton has silu here)."""
    x = _semantic.to_tensor(arg0)
    if x.dtype in (core.float16, core.bfloat16):
        return silu(x.to(core.float32, _semantic=_semantic), _semantic=_semantic).to(x.dtype, _semantic=_semantic)
    denominator = _semantic.add(exp(_semantic.minus(x), _semantic=_semantic), 1.0, True)
    return _semantic.truediv(x, denominator)


def _in_fp32(fn, x, _semantic):
    """fn(x) for fp16/bf16 x computed in fp32 and converted back, as the other float functions are."""
    if x.dtype in _HALF:
        return fn(x.to(core.float32, _semantic=_semantic), _semantic=_semantic).to(x.dtype, _semantic=_semantic)
    return None


@core.extern
def gelu_none(arg0, _semantic=None):
    """GELU with the exact erf: x/2 * (1 + erf(x / sqrt(2))), torch's `gelu(x, approximate="none")`
    (spine-triton has it here)."""
    x = _semantic.to_tensor(arg0)
    half = _in_fp32(gelu_none, x, _semantic)
    if half is not None:
        return half
    inner = erf(_semantic.mul(x, 0.7071067811865476, True), _semantic=_semantic)
    return _semantic.mul(_semantic.mul(x, 0.5, True), _semantic.add(inner, 1.0, True), True)


@core.extern
def gelu_tanh(arg0, _semantic=None):
    """GELU's tanh approximation: x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))), torch's
    `gelu(x, approximate="tanh")` (spine-triton has it here)."""
    x = _semantic.to_tensor(arg0)
    half = _in_fp32(gelu_tanh, x, _semantic)
    if half is not None:
        return half
    cube = _semantic.mul(_semantic.mul(x, x, True), x, True)
    inner = _semantic.mul(_semantic.add(x, _semantic.mul(cube, 0.044715, True), True), 0.7978845608028654, True)
    return _semantic.mul(_semantic.mul(x, 0.5, True),
                         _semantic.add(tanh(inner, _semantic=_semantic), 1.0, True), True)
