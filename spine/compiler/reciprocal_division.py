"""Division by a loop-invariant f32 divisor as multiplication by its reciprocal, with one correction step.

A vector division is the slowest arithmetic instruction x86 has (AVX-512's vdivps: a 16-cycle throughput,
against half a cycle for a multiply-add); softmax's division by its row sum spent a third of the kernel's
time in it. Triton's `/` is not IEEE division (NVIDIA's div.full.f32, within 2 ulp), so the conversion marks
it fastmath<arcp>; tl.math.div_rn (tt.precise_divf) stays unflagged and is never rewritten.

With d invariant in the loop:

    s  = 2^64 if |d| < 2^-100 else 1    (so that 1/d' neither overflows nor loses bits)
    d' = d s,  r = RN(1/d')             (once, before the loop)
    x' = x s,  q = RN(x' r)             (within 1.5 ulp of x/d)
    e  = fma(-q, d', x')                (the residual x' - q d', exact or nearly so)
    q1 = fma(e, r, q)                   (x/d within a hair before the last rounding: within 1 ulp after it,
                                         and the correctly rounded quotient but for the rare x/d within
                                         3 2^-25 ulp of a midpoint, and for |x| below about 2^-100, where
                                         the residual e is subnormal and has lost bits)
    result = q1 unless q1 is NaN, then q (x or d infinite, d zero, or the quotient overflowing: the
                                         product q already holds the IEEE answer there)

Six operations instead of one division: three cycles of two vector ports. On RISC-V the division stays:
there the one measure available here is the guest instruction count, which one vfdiv wins.
Runs after the loops are formed, on scalar ops; divisions arcp marks but this rewrite leaves (variant
divisors, code outside loops, RISC-V) lose the flag, so LLVM never applies its own, less exact, reciprocal.
"""
from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, math

from .ir_walk import collect_ops, defining_op

LOOPS = ("scf.for", "scf.parallel", "scf.while")
TINY_DIVISOR = 2.0 ** -100
SCALE = 2.0 ** 64


def divide_by_reciprocals(module, enabled: bool) -> None:
    """Rewrite every arcp-flagged scalar f32 division whose divisor is invariant in its innermost loop (when
    `enabled`); clear the flag on every other."""
    for op in collect_ops(module, _flagged_f32_division):
        loop = _innermost_loop(op)
        divisor = op.operands[1]
        if enabled and loop is not None and _invariant(divisor, loop):
            _rewrite(op, loop)
        else:
            op.attributes["fastmath"] = ir.Attribute.parse("#arith.fastmath<none>")


def _flagged_f32_division(op) -> bool:
    if op.name != "arith.divf" or not isinstance(op.results[0].type, ir.F32Type):
        return False
    return "arcp" in str(op.attributes["fastmath"])


def _innermost_loop(op):
    parent = op.parent
    while parent is not None and parent.name not in LOOPS:
        parent = parent.parent
    return parent


def _inside(op, ancestor) -> bool:
    while op is not None:
        if op == ancestor:
            return True
        op = op.parent
    return False


def _invariant(value, loop) -> bool:
    owner = defining_op(value)
    if owner is None:                                   # a block argument: of the loop or something in it?
        return not _inside(value.owner.owner, loop)
    return owner.name == "arith.constant" or not _inside(owner, loop)


def _rewrite(division, loop) -> None:
    f32 = ir.F32Type.get()

    def c(value):
        return arith.ConstantOp(f32, value).result
    x, d = division.operands
    constant = defining_op(d) is not None and defining_op(d).name == "arith.constant"
    # Computed once: before the loop, or where a constant divisor is (LLVM folds it all then).
    with ir.InsertionPoint(division if constant else loop), division.location:
        tiny = arith.CmpFOp(arith.CmpFPredicate.OLT, math.AbsFOp(d).result, c(TINY_DIVISOR)).result
        scale = arith.SelectOp(tiny, c(SCALE), c(1.0)).result
        scaled_d = arith.MulFOp(d, scale).result
        reciprocal = arith.DivFOp(c(1.0), scaled_d).result
    with ir.InsertionPoint(division), division.location:
        scaled_x = arith.MulFOp(x, scale).result
        q = arith.MulFOp(scaled_x, reciprocal).result
        residual = math.FmaOp(arith.NegFOp(q).result, scaled_d, scaled_x).result
        corrected = math.FmaOp(residual, reciprocal, q).result
        nan = arith.CmpFOp(arith.CmpFPredicate.UNO, corrected, corrected).result
        result = arith.SelectOp(nan, q, corrected).result
    division.results[0].replace_all_uses_with(result)
    division.erase()
