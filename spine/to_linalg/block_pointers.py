"""Block pointers: tt.make_tensor_ptr and tt.advance build a BlockPointer state; loads and stores through
it (load.py, store.py) become the same strided block copies as structured pointer tensors, with the
boundary checks turned into mask bounds:

    block element i (per dim d) is at offsets[d] + i[d]; it is inside when 0 <= offsets[d] + i[d] < shape[d]
"""
from __future__ import annotations

from dataclasses import replace

from mlir import ir

from . import index_math as im
from . import states as st
from .converter import handles


def block_pointer_type(ty: ir.Type):
    """(element type, block shape) of `!tt.ptr<tensor<...>>`, or None for other types."""
    if not isinstance(ty, ir.OpaqueType) or not ty.data.startswith("ptr<tensor<"):
        return None
    tensor_type = ir.RankedTensorType(ir.Type.parse(ty.data[len("ptr<"):-1]))
    return tensor_type.element_type, tuple(tensor_type.shape)


@handles("tt.make_tensor_ptr")
def convert_make_tensor_ptr(conv, op):
    base = conv.state(op.operands[0])
    if not isinstance(base, st.PointerState) or base.shape:
        raise conv.unsupported(op, "a block pointer over something other than a scalar pointer")
    element, block_shape = block_pointer_type(op.results[0].type)
    rank = len(block_shape)
    operands = list(op.operands)[1:]
    shape, strides, offsets = (tuple(im.from_integer(conv.concrete(v)) for v in operands[i * rank:(i + 1) * rank])
                               for i in range(3))
    conv.bind(op.results[0], st.BlockPointer(base.base, element, block_shape, shape, strides, offsets, base.offset))


@handles("tt.advance")
def convert_advance(conv, op):
    ptr = conv.state(op.operands[0])
    deltas = [im.from_integer(conv.concrete(v)) for v in list(op.operands)[1:]]
    conv.bind(op.results[0], replace(ptr, offsets=tuple(im.add(o, d) for o, d in zip(ptr.offsets, deltas))))


def as_pointer_and_mask(ptr: st.BlockPointer, boundary_check):
    """The PointerState of the block and the MaskState of its boundary-checked dims (None if none)."""
    offset = ptr.base_offset
    for o, s in zip(ptr.offsets, ptr.strides):
        offset = im.add(offset, im.mul(o, s))
    pointer = st.PointerState(ptr.base, ptr.element_type, ptr.block_shape, offset, ptr.strides)
    if not boundary_check:
        return pointer, None
    bounds = []
    for d, n in enumerate(ptr.block_shape):
        if d in boundary_check:
            bounds.append((im.sub(0, ptr.offsets[d]), im.sub(ptr.shape[d], ptr.offsets[d])))
        else:
            bounds.append((0, n))
    return pointer, st.MaskState(ptr.block_shape, tuple(bounds))


def boundary_check(op) -> tuple:
    try:
        return tuple(ir.DenseI32ArrayAttr(op.attributes["boundaryCheck"]))
    except KeyError:
        return ()

