"""Math functions for kernels on CPUs (`from triton.language.extra.cpu import libdevice`).

Each function is a `tt.extern_elementwise` naming the C library symbol; the converter
(to_linalg/extern.py) turns known symbols into math-dialect ops, so no library is linked for them.
fp16/bf16 arguments are computed in fp32, as on GPUs."""
from triton.language import core

_F32, _F64 = core.dtype("fp32"), core.dtype("fp64")


def _unary(f32_symbol: str, f64_symbol: str):
    @core.extern
    def fn(arg0, _semantic=None):
        arg0 = _semantic.to_tensor(arg0)
        if arg0.dtype in (core.float16, core.bfloat16):
            result = fn(arg0.to(core.float32, _semantic=_semantic), _semantic=_semantic)
            return result.to(arg0.dtype, _semantic=_semantic)
        return core.extern_elementwise("", "", [arg0], {
            (_F32, ): (f32_symbol, _F32),
            (_F64, ): (f64_symbol, _F64),
        }, is_pure=True, _semantic=_semantic)
    fn.__name__ = f32_symbol.rstrip("f") if f32_symbol.endswith("f") else f32_symbol
    return fn


def _binary(f32_symbol: str, f64_symbol: str):
    @core.extern
    def fn(arg0, arg1, _semantic=None):
        return core.extern_elementwise("", "", [arg0, arg1], {
            (_F32, _F32): (f32_symbol, _F32),
            (_F64, _F64): (f64_symbol, _F64),
        }, is_pure=True, _semantic=_semantic)
    return fn


erf = _unary("erff", "erf")
exp = _unary("expf", "exp")
exp2 = _unary("exp2f", "exp2")
expm1 = _unary("expm1f", "expm1")
log = _unary("logf", "log")
log2 = _unary("log2f", "log2")
log10 = _unary("log10f", "log10")
log1p = _unary("log1pf", "log1p")
sqrt = _unary("sqrtf", "sqrt")
rsqrt = _unary("rsqrtf", "rsqrt")
tanh = _unary("tanhf", "tanh")
sin = _unary("sinf", "sin")
cos = _unary("cosf", "cos")
tan = _unary("tanf", "tan")
asin = _unary("asinf", "asin")
acos = _unary("acosf", "acos")
atan = _unary("atanf", "atan")
sinh = _unary("sinhf", "sinh")
cosh = _unary("coshf", "cosh")
asinh = _unary("asinhf", "asinh")
acosh = _unary("acoshf", "acosh")
atanh = _unary("atanhf", "atanh")
floor = _unary("floorf", "floor")
ceil = _unary("ceilf", "ceil")
trunc = _unary("truncf", "trunc")
round = _unary("roundf", "round")
rint = _unary("rintf", "rint")
cbrt = _unary("cbrtf", "cbrt")
fabs = _unary("fabsf", "fabs")
pow = _binary("powf", "pow")
atan2 = _binary("atan2f", "atan2")


@core.extern
def silu(arg0, _semantic=None):
    """x * sigmoid(x) = x / (1 + exp(-x)); fp16/bf16 are computed in fp32 (spine-triton has silu here)."""
    x = _semantic.to_tensor(arg0)
    if x.dtype in (core.float16, core.bfloat16):
        return silu(x.to(core.float32, _semantic=_semantic), _semantic=_semantic).to(x.dtype, _semantic=_semantic)
    denominator = _semantic.add(exp(_semantic.minus(x), _semantic=_semantic), 1.0, True)
    return _semantic.truediv(x, denominator)
