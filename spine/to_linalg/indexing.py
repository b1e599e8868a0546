"""Ops that index tensors with values: tt.gather (tl.gather) and tt.histogram (tl.histogram)."""
from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, linalg, scf, tensor

from . import builders as b
from . import index_math as im
from . import materialize
from .converter import handles
from .memory import mask_bit, mask_bytes
from .types import element_type, shape_of


@handles("tt.gather")
def convert_gather(conv, op):
    """out[i] = src[i with i[axis] replaced by idx[i]]: a linalg.generic over idx reading src."""
    axis = ir.IntegerAttr(op.attributes["axis"]).value
    src, was_bool = materialize.concrete_or_bytes(conv, op.operands[0])
    idx = conv.concrete(op.operands[1])
    shape = shape_of(idx.type)
    rank = len(shape)
    limit = shape_of(src.type)[axis] - 1
    out = b.empty(shape, element_type(src.type))

    def body(index, _out):
        ivs = [linalg.IndexOp(d).result for d in range(rank)]
        # clamped: an out-of-range index is undefined behaviour in Triton, never a wild read here
        ivs[axis] = im.as_value(im.clamp(im.from_integer(index), 0, limit))
        return [tensor.ExtractOp(src, ivs).result]
    gathered = b.generic([out.type], [idx], [out], [b.identity_map(rank)] * 2, rank, body).results[0]
    conv.bind(op.results[0], materialize.as_state(gathered, was_bool))


@handles("tt.histogram")
def convert_histogram(conv, op):
    """Counts of each value in [0, bins); other values (and masked-off lanes) are not counted."""
    values = conv.concrete(op.operands[0])
    mask = mask_bytes(conv.concrete(op.operands[1])) if len(op.operands) > 1 else None
    result_type = op.results[0].type
    bins = shape_of(result_type)[0]
    counts_type = element_type(result_type)
    zero = arith.ConstantOp(counts_type, 0).result
    one = arith.ConstantOp(counts_type, 1).result
    counts = linalg.fill(zero, outs=[b.empty((bins,), counts_type)])
    shape = shape_of(values.type)

    def bump(current, ivs):
        value = im.from_integer(tensor.ExtractOp(values, ivs).result)
        inside = arith.AndIOp(arith.CmpIOp(arith.CmpIPredicate.sge, value, im.const(0)).result,
                              arith.CmpIOp(arith.CmpIPredicate.slt, value, im.const(bins)).result).result
        if mask is not None:
            inside = arith.AndIOp(inside, mask_bit(mask, ivs)).result
        branch = scf.IfOp(inside, [current.type], has_else=True)
        with ir.InsertionPoint(branch.then_block):
            bumped = arith.AddIOp(tensor.ExtractOp(current, [value]).result, one).result
            scf.YieldOp([tensor.InsertOp(bumped, current, [value]).result])
        with ir.InsertionPoint(branch.else_block):
            scf.YieldOp([current])
        return branch.results[0]

    def level(d, current, ivs):
        """A sequential loop nest carrying the counts: each element increments one bin."""
        if d == len(shape):
            return bump(current, ivs)
        loop = scf.ForOp(im.const(0), im.const(shape[d]), im.const(1), [current])
        with ir.InsertionPoint(loop.body):
            scf.YieldOp([level(d + 1, loop.inner_iter_args[0], ivs + [loop.induction_variable])])
        return loop.results[0]
    conv.bind(op.results[0], level(0, counts, []))
