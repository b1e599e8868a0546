"""tt.reduce → a linalg.generic whose reduced axis is a reduction iterator, the kernel's combiner its body.

Any combiner works (sum, max, argmax over several operands, user functions) because no identity element
is needed: the first slice along the axis seeds the accumulator and the rest is reduced into it.

    tt.reduce(%x : tensor<4x8xf32>) {axis = 1} ({ ^bb0(%a, %b): tt.reduce.return (%a - %b) })
  becomes
    %init = tensor.extract_slice %x[0, 0] [4, 1] [1, 1] : tensor<4x8xf32> to tensor<4xf32>
    %rest = tensor.extract_slice %x[0, 1] [4, 7] [1, 1]
    linalg.generic {iterator_types = ["parallel", "reduction"]} ins(%rest) outs(%init)
      (%in, %acc) { linalg.yield (%acc - %in) }

A combiner that is one known op reduces the whole axis instead, so that the loop's trip count is the
block's (a multiple of the vector length: no scalar remainder loop). Sums and products start from their
identity (-0.0 for addf: x + -0.0 is x for every x, signed zeros included); idempotent ops (max, min, and,
or) start from the first slice, which they may see twice, except on targets with scalable vectors (RVV),
whose remainder is one shorter vector anyway, so idempotent ops keep the first-slice seed and the rest: there LLVM interleaves the NaN-aware max loop
over 1023 elements twice and over 1024 once (riscv64 softmax: 380,416 guest instructions against 350,912).
"""
from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, linalg, tensor

from . import materialize
from . import states as st
from .converter import handles
from .builders import splat
from .types import element_type, is_bool, shape_of

IDENTITIES = {"arith.addf": -0.0, "arith.mulf": 1.0, "arith.addi": 0, "arith.muli": 1, "arith.xori": 0}
IDEMPOTENT = {"arith.maxnumf", "arith.minnumf", "arith.maximumf", "arith.minimumf", "arith.maxsi", "arith.minsi",
              "arith.maxui", "arith.minui", "arith.andi", "arith.ori"}


def _slice_type(value: ir.Value, axis: int) -> ir.Type:
    """The type of one slice across `axis`, the axis dropped."""
    shape = [n for d, n in enumerate(shape_of(value.type)) if d != axis]
    return ir.RankedTensorType.get(shape, element_type(value.type))


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
    whole_axis = _whole_axis(conv, op) if count > 1 else None
    if whole_axis in IDENTITIES:
        inits = [_identity(whole_axis, _slice_type(x, axis)) for x in inputs]
    else:
        inits = [_slice(x, axis, 0, 1, drop_axis=True) for x in inputs]
    if count == 1:
        results = inits
    else:
        rest = inputs if whole_axis else [_slice(x, axis, 1, count - 1, drop_axis=False) for x in inputs]
        reduce_op = _reduction(rest, inits, axis)
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


def _reduction(inputs: list[ir.Value], inits: list[ir.Value], axis: int) -> linalg.GenericOp:
    """linalg.reduce written as the linalg.generic it stands for: elementwise fusion, which leaves named
    ops alone, then folds producers such as the x * x of a sum of squares into the reduction's loop instead
    of writing them to a buffer first."""
    rank = len(shape_of(inputs[0].type))
    kept = [ir.AffineExpr.get_dim(d) for d in range(rank) if d != axis]
    maps = [ir.AffineMapAttr.get(ir.AffineMap.get_identity(rank))] * len(inputs) + \
        [ir.AffineMapAttr.get(ir.AffineMap.get(rank, 0, kept))] * len(inits)
    iterators = [ir.Attribute.parse(f"#linalg.iterator_type<{'reduction' if d == axis else 'parallel'}>")
                 for d in range(rank)]
    return linalg.GenericOp([v.type for v in inits], inputs, inits, ir.ArrayAttr.get(maps),
                            ir.ArrayAttr.get(iterators))


def _whole_axis(conv, op) -> str | None:
    """The combiner's one op when the reduction covers the whole axis (see above), else None."""
    name = _single_op_combiner(op)
    if name in IDEMPOTENT and conv.microkernel is not None and conv.microkernel.scalable:
        return None
    return name


def _single_op_combiner(op) -> str | None:
    """The name of the combiner's one op when the reduction may cover the whole axis (see above)."""
    if len(op.operands) != 1:
        return None
    block = op.regions[0].blocks[0]
    ops = list(block.operations)
    if len(ops) != 2 or ops[1].operands[0] != ops[0].results[0]:
        return None
    name = ops[0].operation.name
    accumulated, next_value = block.arguments
    if list(ops[0].operands) not in ([accumulated, next_value], [next_value, accumulated]):
        return None
    return name if name in IDENTITIES or name in IDEMPOTENT else None


def _identity(name: str, result_type: ir.Type) -> ir.Value:
    elem = element_type(result_type)
    scalar = arith.ConstantOp(elem, IDENTITIES[name]).result
    return splat(scalar, shape_of(result_type)) if shape_of(result_type) else tensor.FromElementsOp(
        result_type, [scalar]).result


def _allow_reassociation(block: ir.Block) -> None:
    """Triton fixes no order for reductions (GPUs reduce in trees); saying so lets LLVM vectorise float
    reductions instead of summing one element after the other."""
    reassoc = ir.Attribute.parse("#arith.fastmath<reassoc>")
    for op in block.operations:
        if "fastmath" in op.attributes:
            op.attributes["fastmath"] = reassoc
