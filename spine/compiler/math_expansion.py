"""Vectorisable f32 `math.exp`.

Upstream lowers math.exp to llvm.exp, which becomes a scalar `expf` call on RISC-V (LLVM has no vector
math library for it), so a loop containing it does not vectorise. MLIR's own polynomial approximations
are not exposed as a pass in the Python bindings we pin, hence this small rewrite: Cody-Waite range
reduction, a degree-6 minimax polynomial (Cephes expf coefficients, about 1 ulp), and scaling by 2^k in
two steps so that results down to the subnormal range stay exact.

Runs after loops were formed, on scalar ops; tanh and friends reach it through math-expand-ops."""
from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, math

LOG2E = 1.44269504088896341
LN2_HI = 0.693359375
LN2_LO = -2.12194440e-4
POLY = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1)
MAX_INPUT = 88.72283935546875   # log(FLT_MAX)
MIN_INPUT = -104.0              # below this exp underflows to 0 even as a subnormal


def _f(value: float) -> ir.Value:
    return arith.ConstantOp(ir.F32Type.get(), value).result


def _i(value: int) -> ir.Value:
    return arith.ConstantOp(ir.IntegerType.get_signless(32), value).result


def _pow2(k: ir.Value) -> ir.Value:
    """2^k as f32 for integer k in [-126, 127], built from the exponent bits."""
    bits = arith.ShLIOp(arith.AddIOp(k, _i(127)).result, _i(23)).result
    return arith.BitcastOp(ir.F32Type.get(), bits).result


def expand_exp(x: ir.Value) -> ir.Value:
    clamped = arith.MinimumFOp(arith.MaximumFOp(x, _f(MIN_INPUT)).result, _f(MAX_INPUT)).result
    k = math.FloorOp(arith.AddFOp(arith.MulFOp(clamped, _f(LOG2E)).result, _f(0.5)).result).result
    r = arith.SubFOp(clamped, arith.MulFOp(k, _f(LN2_HI)).result).result
    r = arith.SubFOp(r, arith.MulFOp(k, _f(LN2_LO)).result).result
    p = _f(POLY[0])
    for c in POLY[1:]:
        p = math.FmaOp(p, r, _f(c)).result
    r2 = arith.MulFOp(r, r).result
    y = arith.AddFOp(math.FmaOp(p, r2, r).result, _f(1.0)).result
    ki = arith.FPToSIOp(ir.IntegerType.get_signless(32), k).result
    k1 = arith.ShRSIOp(ki, _i(1)).result
    k2 = arith.SubIOp(ki, k1).result
    result = arith.MulFOp(arith.MulFOp(y, _pow2(k1)).result, _pow2(k2)).result
    overflow = arith.CmpFOp(arith.CmpFPredicate.OGT, x, _f(MAX_INPUT)).result
    result = arith.SelectOp(overflow, _f(float("inf")), result).result
    is_nan = arith.CmpFOp(arith.CmpFPredicate.UNO, x, x).result
    return arith.SelectOp(is_nan, x, result).result


def expand_math(module) -> None:
    """Replace every scalar f32 math.exp in the module by expand_exp."""
    exps = []

    def collect(op):
        if op.operation.name == "math.exp" and isinstance(op.results[0].type, ir.F32Type):
            exps.append(op.operation)
        return ir.WalkResult.ADVANCE
    module.operation.walk(collect)
    for op in exps:
        with ir.InsertionPoint(op), op.location:
            value = expand_exp(op.operands[0])
        op.results[0].replace_all_uses_with(value)
        op.erase()
