"""tt.scan (tl.cumsum, tl.cumprod, tl.associative_scan): a loop along the scanned axis that combines each
slice with the running result of the previous one, with the kernel's own combiner, so any combiner and
any number of operands work. Slices across the other dims are combined as one linalg.generic, which
vectorises; the axis itself is sequential.

    result = x
    for i in 1 .. n-1:                       (reverse: n-2 .. 0, combining with slice i+1)
        result[i] = combine(result[i-1], result[i])
"""
from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, linalg, scf, tensor

from . import builders as b
from . import index_math as im
from . import materialize
from . import states as st
from .converter import handles
from .types import element_type, is_bool, shape_of


def _slice_static(value: ir.Value, axis: int):
    shape = list(shape_of(value.type))
    sizes = list(shape)
    sizes[axis] = 1
    reduced = ir.RankedTensorType.get([n for d, n in enumerate(shape) if d != axis], element_type(value.type))
    static_offsets = [0] * len(shape)
    static_offsets[axis] = b.DYNAMIC_STRIDE
    return sizes, reduced, static_offsets


def _extract(value: ir.Value, axis: int, index: ir.Value) -> ir.Value:
    sizes, reduced, static_offsets = _slice_static(value, axis)
    return tensor.ExtractSliceOp(reduced, value, [index], [], [], ir.DenseI64ArrayAttr.get(static_offsets),
                                 ir.DenseI64ArrayAttr.get(sizes),
                                 ir.DenseI64ArrayAttr.get([1] * len(sizes))).result


def _insert(piece: ir.Value, into: ir.Value, axis: int, index: ir.Value) -> ir.Value:
    sizes, _, static_offsets = _slice_static(into, axis)
    return tensor.InsertSliceOp(piece, into, [index], [], [], ir.DenseI64ArrayAttr.get(static_offsets),
                                ir.DenseI64ArrayAttr.get(sizes), ir.DenseI64ArrayAttr.get([1] * len(sizes))).result


@handles("tt.scan")
def convert_scan(conv, op):
    axis = ir.IntegerAttr(op.attributes["axis"]).value
    reverse = bool(ir.BoolAttr(op.attributes["reverse"]).value) if "reverse" in op.attributes else False
    # Boolean operands are scanned as i8 bytes (the combiner still sees i1): the loop would otherwise carry
    # an i1 tensor, bufferized into an i1 buffer that MLIR's LLVM lowering cannot store to.
    bools = [is_bool(v.type) for v in op.operands]
    inputs = [materialize.widen_bool(conv.concrete(v)) for v in op.operands]
    count = shape_of(inputs[0].type)[axis]
    if count == 1:
        _bind_results(conv, op, inputs, bools)
        return
    n = len(inputs)
    combiner = op.regions[0].blocks[0]
    loop = scf.ForOp(im.const(1), im.const(count), im.const(1), inputs)
    with ir.InsertionPoint(loop.body):
        step = loop.induction_variable
        if reverse:
            index = arith.SubIOp(im.const(count - 1), step).result
            neighbour = arith.AddIOp(index, im.const(1)).result
        else:
            index = step
            neighbour = arith.SubIOp(step, im.const(1)).result
        running = list(loop.inner_iter_args)
        previous = [_extract(r, axis, neighbour) for r in running]
        current = [_extract(r, axis, index) for r in running]
        slice_shape = shape_of(previous[0].type)
        rank = len(slice_shape)
        outs = [b.empty(slice_shape, element_type(v.type)) for v in current]
        generic = linalg.GenericOp([o.type for o in outs], previous + current, outs,
                                   ir.ArrayAttr.get([b.identity_map(rank)] * (3 * n)), b.parallel_iterators(rank))
        block = generic.regions[0].blocks.append(*[element_type(v.type) for v in previous + current + outs])
        with ir.InsertionPoint(block):
            for i in range(2 * n):
                arg = block.arguments[i]
                conv.bind(combiner.arguments[i], materialize.narrow_byte(arg) if bools[i % n] else arg)
            *body, terminator = list(combiner.operations)
            for inner in body:
                conv.convert_op(inner)
            linalg.YieldOp([materialize.widen_bool(conv.concrete(v)) for v in terminator.operands])
        scf.YieldOp([_insert(piece, r, axis, index) for piece, r in zip(generic.results, running)])
    _bind_results(conv, op, list(loop.results), bools)


def _bind_results(conv, op, values, bools) -> None:
    for old, new, was_bool in zip(op.results, values, bools):
        conv.bind(old, st.BoolBytes(new) if was_bool else new)
