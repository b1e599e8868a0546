"""tt.reduce → linalg.reduce, with the kernel's own combiner as the body.

Any combiner works (sum, max, argmax over several operands, user functions) because no identity element
is needed: the first slice along the axis seeds the accumulator and the rest is reduced into it.

    tt.reduce(%x : tensor<4x8xf32>) {axis = 1} ({ ^bb0(%a, %b): tt.reduce.return (%a + %b) })
  becomes
    %init = tensor.extract_slice %x[0, 0] [4, 1] [1, 1] : tensor<4x8xf32> to tensor<4xf32>
    %rest = tensor.extract_slice %x[0, 1] [4, 7] [1, 1]
    linalg.reduce ins(%rest) outs(%init) dimensions = [1] (%in, %acc) { linalg.yield (%acc + %in) }
"""
from __future__ import annotations

from mlir import ir
from mlir.dialects import linalg, tensor

from . import materialize
from . import states as st
from .converter import handles
from .types import element_type, is_bool, shape_of


def _slice(value: ir.Value, axis: int, start: int, size: int, drop_axis: bool) -> ir.Value:
    shape = list(shape_of(value.type))
    starts = [0] * len(shape)
    starts[axis] = start
    sizes = list(shape)
    sizes[axis] = size
    result_shape = [n for d, n in enumerate(sizes) if not (drop_axis and d == axis)]
    result = ir.RankedTensorType.get(result_shape, element_type(value.type))
    return tensor.ExtractSliceOp(result, value, [], [], [], ir.DenseI64ArrayAttr.get(starts),
                                 ir.DenseI64ArrayAttr.get(sizes), ir.DenseI64ArrayAttr.get([1] * len(shape))).result


@handles("tt.reduce")
def convert_reduce(conv, op):
    axis = ir.IntegerAttr(op.attributes["axis"]).value
    # Boolean operands are reduced as i8 bytes (the combiner still sees i1): an i1 accumulator would be
    # bufferized into an i1 buffer, which MLIR's LLVM lowering cannot store to.
    bools = [is_bool(v.type) for v in op.operands]
    inputs = [materialize.widen_bool(conv.concrete(v)) for v in op.operands]
    count = shape_of(inputs[0].type)[axis]
    inits = [_slice(x, axis, 0, 1, drop_axis=True) for x in inputs]
    if count == 1:
        results = inits
    else:
        rest = [_slice(x, axis, 1, count - 1, drop_axis=False) for x in inputs]
        reduce_op = linalg.ReduceOp([v.type for v in inits], rest, inits, ir.DenseI64ArrayAttr.get([axis]))
        elems = [element_type(v.type) for v in inputs]
        block = reduce_op.regions[0].blocks.append(*elems, *elems)
        combiner = op.regions[0].blocks[0]
        n = len(inputs)
        with ir.InsertionPoint(block):
            args = [materialize.narrow_byte(a) if flag else a for a, flag in zip(block.arguments, bools + bools)]
            # triton's combiner takes (accumulated..., next...); linalg's block is (inputs..., accumulators...).
            for i in range(n):
                conv.bind(combiner.arguments[i], args[n + i])
                conv.bind(combiner.arguments[n + i], args[i])
            *body, terminator = list(combiner.operations)
            for inner in body:
                conv.convert_op(inner)
            linalg.YieldOp([materialize.widen_bool(conv.concrete(v)) for v in terminator.operands])
        _allow_reassociation(block)
        results = list(reduce_op.results)
    for old, new, was_bool in zip(op.results, results, bools):
        if not shape_of(old.type):
            new = tensor.ExtractOp(new, []).result
            conv.bind(old, materialize.narrow_byte(new) if was_bool else new)
        else:
            conv.bind(old, st.BoolBytes(new) if was_bool else new)


def _allow_reassociation(block: ir.Block) -> None:
    """Triton fixes no order for reductions (GPUs reduce in trees); saying so lets LLVM vectorise float
    reductions instead of summing one element after the other."""
    reassoc = ir.Attribute.parse("#arith.fastmath<reassoc>")
    for op in block.operations:
        if "fastmath" in op.attributes:
            op.attributes["fastmath"] = reassoc
