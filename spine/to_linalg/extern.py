"""tt.extern_elementwise: calls from `libdevice` (spine.language.cpu.libdevice) become math-dialect ops, so
they vectorise (the lowering replaces them with polynomial approximations rather than libm calls)."""
from __future__ import annotations

from mlir import ir

from . import fp8
from .converter import handles

# C library symbol → math op. The libdevice module names functions by these symbols.
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
    "fmaf": "math.fma", "asinhf": "math.asinh", "acoshf": "math.acosh", "atanhf": "math.atanh",
}


@handles("tt.extern_elementwise")
def convert_extern(conv, op):
    symbol = ir.StringAttr(op.attributes["symbol"]).value
    operands = [conv.concrete(v) for v in op.operands]
    expansion = fp8.e4b15_expansion(symbol)
    if expansion is not None:
        conv.bind(op.results[0], expansion(*operands))
        return
    name = MATH_OPS.get(symbol)
    if name is None:
        raise conv.unsupported(op, f"library function '{symbol}'")
    new = ir.Operation.create(name, results=[op.results[0].type], operands=operands)
    conv.bind(op.results[0], new.results[0])
