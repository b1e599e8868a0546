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

Sums of fp16 and bf16 accumulate in fp32 and are rounded once, at the end. Triton fixes no order for a
reduction, and so no rounding of its partial sums: a GPU rounds each step of its tree; a CPU summing a row of
1,024 in bf16 one vector after the other would lose the row's small terms altogether (8 bits of mantissa).
torch's CPU kernels and triton-cpu accumulate such sums in fp32, and so does Spine. A sum of products
(`tl.sum(a * x[None, :], axis=1)`, a GEMV) also forms the products in fp32, unrounded, as fusing a multiply
into the add that consumes it (triton's `enable_fp_fusion`, on by default) allows; compiled with
`enable_fp_fusion=False` the products are rounded to their type first, as written. A sum that is widened
back to fp32 at once (`acc += tl.sum(...)` into an fp32 `acc`) is taken unrounded, again unless fp fusion is
off (arith.py asks `Converter.wide_sums`); torch's GEMV gives the same bf16 results then:

    %p = arith.mulf %a, %x : tensor<16x64xbf16>
    %s = tt.reduce(%p) {axis = 1} ({ ^bb0(%u, %v): tt.reduce.return (arith.addf %u, %v) }) -> tensor<16xbf16>
  becomes
    %init = -0.0 : tensor<16xf32>
    %sum = linalg.generic {iterator_types = ["parallel", "reduction"]} ins(%a, %x) outs(%init)
      (%ai, %xi, %acc) { linalg.yield (%acc + extf(%ai) * extf(%xi)) }
    %s = arith.truncf %sum : tensor<16xf32> to tensor<16xbf16>
"""
from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, linalg, tensor

from ..ir_walk import defining_op
from . import materialize
from . import states as st
from .converter import handles
from .builders import splat
from .types import element_type, is_bool, shape_of

IDENTITIES = {"arith.addf": -0.0, "arith.mulf": 1.0, "arith.addi": 0, "arith.muli": 1, "arith.xori": 0}
REASSOCIATE = "#arith.fastmath<reassoc>"
IDEMPOTENT = {"arith.maxnumf", "arith.minnumf", "arith.maximumf", "arith.minimumf", "arith.maxsi", "arith.minsi",
              "arith.maxui", "arith.minui", "arith.andi", "arith.ori"}


def _slice_type(value: ir.Value, axis: int, elem: ir.Type | None = None) -> ir.Type:
    """The type of one slice across `axis`, the axis dropped (of element type `elem`, default value's)."""
    shape = [n for d, n in enumerate(shape_of(value.type)) if d != axis]
    return ir.RankedTensorType.get(shape, elem or element_type(value.type))


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
    if whole_axis == "arith.addf" and _is_half(element_type(op.operands[0].type)):
        conv.bind(op.results[0], _sum_in_fp32(conv, op.operands[0], axis))
        return
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


def _is_half(elem: ir.Type) -> bool:
    return isinstance(elem, (ir.F16Type, ir.BF16Type))


def _fused_factors(conv, value: ir.Value) -> list | None:
    """The two factors of `value` when it is a product of its own type used only by the sum, and products
    may fuse into it; else None."""
    product = defining_op(value)
    if not conv.fp_fusion or product is None or product.name != "arith.mulf" or len(list(value.uses)) != 1:
        return None
    return list(product.operands)


def _sum_in_fp32(conv, value: ir.Value, axis: int) -> ir.Value:
    """The sum of the half-precision tensor `value` (TTIR) along `axis`, accumulated in fp32 and rounded
    once to its type (see above)."""
    half, f32 = element_type(value.type), ir.F32Type.get()
    factors = _fused_factors(conv, value)
    inputs = [conv.concrete(v) for v in factors or [value]]
    init = _identity("arith.addf", _slice_type(value, axis, f32))
    sum_op = _reduction(inputs, [init], axis)
    block = sum_op.regions[0].blocks.append(*[element_type(x.type) for x in inputs], f32)
    with ir.InsertionPoint(block):
        wide = [arith.ExtFOp(f32, x).result for x in block.arguments[:-1]]
        term = wide[0] if len(wide) == 1 else arith.MulFOp(wide[0], wide[1]).result
        linalg.YieldOp([arith.AddFOp(block.arguments[-1], term, fastmath=ir.Attribute.parse(REASSOCIATE)).result])
    total = sum_op.results[0]
    rounded_type = _slice_type(value, axis)
    if not shape_of(rounded_type):
        total, rounded_type = tensor.ExtractOp(total, []).result, half
    rounded = arith.TruncFOp(rounded_type, total).result
    if conv.fp_fusion:
        conv.wide_sums[rounded] = total
    return rounded


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
    for op in block.operations:
        if "fastmath" in op.attributes:
            op.attributes["fastmath"] = ir.Attribute.parse(REASSOCIATE)
