"""Shape-building ops: tt.make_range, tt.splat, tt.broadcast, tt.expand_dims, and tensor constants.

They keep structure: `tt.make_range {start = 0, end = 128}` becomes AffineIndex(offset 0, stride 1) and
emits nothing; only a use that needs real values materialises it (a linalg.generic over linalg.index).

Shape ops move boolean tensors as their i8 bytes (BoolBytes): an i1 result with several uses would be
bufferized into an i1 buffer, which MLIR's LLVM lowering cannot store to."""
from __future__ import annotations

from dataclasses import replace

from mlir import ir
from mlir.dialects import linalg, tensor

from . import builders as b
from . import index_math as im
from . import materialize
from . import states as st
from . import wraparound
from .converter import handles
from .types import element_type, is_bool, is_integer, shape_of


_operand = materialize.concrete_or_bytes
_wrap = materialize.as_state


@handles("tt.make_range")
def convert_make_range(conv, op):
    start = ir.IntegerAttr(op.attributes["start"]).value
    ty = op.results[0].type
    conv.bind(op.results[0], st.AffineIndex(shape_of(ty), start, (1,), element_type(ty)))


@handles("tt.splat")
def convert_splat(conv, op):
    shape = shape_of(op.results[0].type)
    source = conv.state(op.operands[0])
    if isinstance(source, st.PointerState):
        conv.bind(op.results[0], st.PointerState(source.base, source.element_type, shape, source.offset,
                                                 (0,) * len(shape)))
        return
    scalar = conv.concrete(op.operands[0])
    if is_bool(scalar.type):
        conv.bind(op.results[0], st.uniform_mask(scalar, shape))
    elif is_integer(scalar.type):
        conv.bind(op.results[0], st.AffineIndex(shape, im.from_integer(scalar), (0,) * len(shape), scalar.type))
    else:
        conv.bind(op.results[0], st.SplatValue(shape, scalar))


@handles("tt.expand_dims")
def convert_expand_dims(conv, op):
    axis = ir.IntegerAttr(op.attributes["axis"]).value
    source = conv.state(op.operands[0])
    expanded = st.expand_dims(source, axis)
    recipe = getattr(source, "exact_value", None)
    if expanded is not None and recipe is not None:
        shape = shape_of(op.results[0].type)
        expanded = replace(expanded, exact_value=lambda: _expand_shape(recipe(), axis, shape))
    if isinstance(source, st.WrappedPointer):
        shape = shape_of(op.results[0].type)
        expanded = wraparound.reshaped(source, st.expand_dims(source.fast, axis),
                                       lambda c: _expand_shape(c, axis, shape))
    if expanded is None:
        if isinstance(source, st.GatherPointer):
            offsets = _expand_shape(source.offsets, axis, shape_of(op.results[0].type))
            expanded = st.GatherPointer(source.base, source.element_type, shape_of(op.results[0].type), offsets)
        else:
            value, was_bool = _operand(conv, op.operands[0])
            expanded = _wrap(_expand_shape(value, axis, shape_of(op.results[0].type)), was_bool)
    conv.bind(op.results[0], expanded)


def _expand_shape(value: ir.Value, axis: int, out_shape) -> ir.Value:
    old_rank = len(out_shape) - 1
    groups = [[d] for d in range(old_rank)]
    if old_rank == 0:
        groups = []
    else:
        for g in groups:
            g[0] += 1 if g[0] >= axis else 0
        owner = min(axis, old_rank - 1)
        groups[owner].append(axis)
        groups[owner].sort()
    result = ir.RankedTensorType.get(list(out_shape), ir.RankedTensorType(value.type).element_type)
    return tensor.ExpandShapeOp(result, value, reassociation(groups), [],
                                ir.DenseI64ArrayAttr.get(list(out_shape))).result


@handles("tt.broadcast")
def convert_broadcast(conv, op):
    shape = shape_of(op.results[0].type)
    source = conv.state(op.operands[0])
    result = st.broadcast(source, shape)
    recipe = getattr(source, "exact_value", None)
    if result is not None and recipe is not None:
        result = replace(result, exact_value=lambda: broadcast_tensor(recipe(), shape))
    if isinstance(source, st.WrappedPointer):
        result = wraparound.reshaped(source, st.broadcast(source.fast, shape), lambda c: broadcast_tensor(c, shape))
    if result is None:
        if isinstance(source, st.GatherPointer):
            result = st.GatherPointer(source.base, source.element_type, shape,
                                      broadcast_tensor(source.offsets, shape))
        else:
            value, was_bool = _operand(conv, op.operands[0])
            result = _wrap(broadcast_tensor(value, shape), was_bool)
    conv.bind(op.results[0], result)


def broadcast_tensor(value: ir.Value, shape) -> ir.Value:
    """Broadcast size-1 dims of a concrete tensor (a linalg.generic reading index 0 along them)."""
    src_shape = shape_of(value.type)
    rank = len(shape)
    exprs = [ir.AffineConstantExpr.get(0) if old != new else ir.AffineDimExpr.get(d)
             for d, (old, new) in enumerate(zip(src_shape, shape))]
    in_map = ir.AffineMapAttr.get(ir.AffineMap.get(rank, 0, exprs))
    out = b.empty(shape, element_type(value.type))
    return b.generic([out.type], [value], [out], [in_map, b.identity_map(rank)], rank, lambda x, _o: [x]).results[0]


@handles("arith.constant")
def convert_constant(conv, op):
    ty = op.results[0].type
    attr = op.attributes["value"]
    if isinstance(ty, ir.RankedTensorType) and isinstance(attr, ir.DenseElementsAttr) and attr.is_splat:
        shape = shape_of(ty)
        elem = element_type(ty)
        splat = attr.get_splat_value()
        if isinstance(elem, ir.IntegerType) and elem.width > 1:
            conv.bind(op.results[0], st.AffineIndex(shape, ir.IntegerAttr(splat).value, (0,) * len(shape), elem))
            return
        from mlir.dialects import arith
        scalar = arith.ConstantOp(elem, splat).result
        if is_bool(elem):
            conv.bind(op.results[0], st.uniform_mask(scalar, shape))
        else:
            conv.bind(op.results[0], st.SplatValue(shape, scalar))
        return
    conv.clone(op)



@handles("tt.trans")
def convert_trans(conv, op):
    order = list(ir.DenseI32ArrayAttr(op.attributes["order"]))
    value, was_bool = _operand(conv, op.operands[0])
    out = b.empty(shape_of(op.results[0].type), element_type(value.type))
    conv.bind(op.results[0], _wrap(b.single_value(linalg.transpose(value, outs=[out], permutation=order)), was_bool))


@handles("tt.reshape")
def convert_reshape(conv, op):
    """Row-major reshape: collapse to 1-D, then expand to the new shape."""
    value, was_bool = _operand(conv, op.operands[0])
    shape = shape_of(op.results[0].type)
    elem = element_type(value.type)
    src_shape = shape_of(value.type)
    if len(src_shape) != 1:
        flat = ir.RankedTensorType.get([_product(src_shape)], elem)
        value = tensor.CollapseShapeOp(flat, value, reassociation([list(range(len(src_shape)))])).result
    if len(shape) != 1:
        result = ir.RankedTensorType.get(list(shape), elem)
        value = tensor.ExpandShapeOp(result, value, reassociation([list(range(len(shape)))]), [],
                                     ir.DenseI64ArrayAttr.get(list(shape))).result
    conv.bind(op.results[0], _wrap(value, was_bool))


def _product(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def reassociation(groups) -> ir.ArrayAttr:
    i64 = ir.IntegerType.get_signless(64)
    return ir.ArrayAttr.get([ir.ArrayAttr.get([ir.IntegerAttr.get(i64, d) for d in g]) for g in groups])


def _insert_slice(piece: ir.Value, into: ir.Value, offsets, sizes) -> ir.Value:
    rank = len(sizes)
    return tensor.InsertSliceOp(piece, into, [], [], [], ir.DenseI64ArrayAttr.get(list(offsets)),
                                ir.DenseI64ArrayAttr.get(list(sizes)), ir.DenseI64ArrayAttr.get([1] * rank)).result


@handles("tt.join")
def convert_join(conv, op):
    """tl.join(a, b): a new minor dim of size 2 holding a and b."""
    shape = shape_of(op.results[0].type)
    values = [_operand(conv, operand) for operand in op.operands]
    was_bool = values[0][1]
    out = b.empty(shape, element_type(values[0][0].type))
    for k, (value, _) in enumerate(values):
        piece = _expand_shape(value, len(shape) - 1, shape[:-1] + (1,)) if shape[:-1] else \
            tensor.ExpandShapeOp(ir.RankedTensorType.get([1], element_type(value.type)), value, ir.ArrayAttr.get([]),
                                 [], ir.DenseI64ArrayAttr.get([1])).result
        out = _insert_slice(piece, out, [0] * (len(shape) - 1) + [k], list(shape[:-1]) + [1])
    conv.bind(op.results[0], _wrap(out, was_bool))


@handles("tt.split")
def convert_split(conv, op):
    """tl.split(x): the two halves of x's minor dim of size 2."""
    value, was_bool = _operand(conv, op.operands[0])
    shape = shape_of(value.type)
    for k, result in enumerate(op.results):
        ty = ir.RankedTensorType.get(list(shape_of(result.type)), element_type(value.type))
        piece = tensor.ExtractSliceOp(ty, value, [], [], [], ir.DenseI64ArrayAttr.get([0] * (len(shape) - 1) + [k]),
                                      ir.DenseI64ArrayAttr.get(list(shape[:-1]) + [1]),
                                      ir.DenseI64ArrayAttr.get([1] * len(shape))).result
        if not isinstance(result.type, ir.RankedTensorType):
            piece = tensor.ExtractOp(piece, []).result
            conv.bind(result, materialize.narrow_byte(piece) if was_bool else piece)
        else:
            conv.bind(result, _wrap(piece, was_bool))


@handles("tt.unsplat")
def convert_unsplat(conv, op):
    """The one element of a tensor<1x...x1> as a scalar (triton's split of two joined scalars)."""
    value, was_bool = _operand(conv, op.operands[0])
    zeros = [im.const(0)] * len(shape_of(value.type))
    element = tensor.ExtractOp(value, zeros).result
    conv.bind(op.results[0], materialize.narrow_byte(element) if was_bool else element)


@handles("tt.cat")
def convert_cat(conv, op):
    """tl.cat(a, b): a then b along dim 0."""
    shape = shape_of(op.results[0].type)
    values = [_operand(conv, operand) for operand in op.operands]
    out = b.empty(shape, element_type(values[0][0].type))
    at = 0
    for value, _ in values:
        part = shape_of(value.type)
        out = _insert_slice(value, out, [at] + [0] * (len(part) - 1), part)
        at += part[0]
    conv.bind(op.results[0], _wrap(out, values[0][1]))
