"""triton's own float ops (tt.clampf, tt.precise_divf, tt.precise_sqrt) as upstream arith/math ops.

    tt.clampf x, lo, hi      min(max(x, lo), hi). With propagateNan = all (tl.PropagateNan.ALL) a NaN x gives
                             NaN (arith.maximumf/minimumf); with none (the default) a NaN x gives lo, as
                             maxnum/minnum do (and as triton's GPU lowering does). NaN bounds are undefined
                             behaviour in triton; here they propagate under all and are ignored under none.
    tt.precise_divf a, b     arith.divf without fast-math flags: IEEE division, correctly rounded (div_rn)
    tt.precise_sqrt x        math.sqrt: IEEE square root, correctly rounded (sqrt_rn; Inductor emits it for
                             every torch.sqrt). Neither the lowering nor LLVM codegen approximates these: no
                             fast-math flag is set anywhere in the pipeline.

Operands that are all splats are computed once on their scalars and splat again.
"""
from __future__ import annotations

from mlir import ir
from mlir.dialects import arith
from mlir.dialects import math as math_d

from . import states as st
from .converter import handles

PROPAGATE_ALL = 0xFFFF     # tl.PropagateNan.ALL; NONE is 0


def _bind_elementwise(conv, op, build) -> None:
    states = [conv.state(v) for v in op.operands]
    if all(isinstance(s, st.SplatValue) for s in states):
        conv.bind(op.results[0], st.SplatValue(states[0].shape, build(*[s.scalar for s in states])))
    else:
        conv.bind(op.results[0], build(*[conv.concrete(v) for v in op.operands]))


@handles("tt.clampf")
def convert_clampf(conv, op):
    propagate = ir.IntegerAttr(op.attributes["propagateNan"]).value == PROPAGATE_ALL
    lower, upper = (arith.MaximumFOp, arith.MinimumFOp) if propagate else (arith.MaxNumFOp, arith.MinNumFOp)

    def build(x, lo, hi):
        return upper(lower(x, lo).result, hi).result
    _bind_elementwise(conv, op, build)


@handles("tt.precise_divf")
def convert_precise_divf(conv, op):
    _bind_elementwise(conv, op, lambda a, b: arith.DivFOp(a, b).result)


@handles("tt.precise_sqrt")
def convert_precise_sqrt(conv, op):
    _bind_elementwise(conv, op, lambda x: math_d.SqrtOp(x).result)
