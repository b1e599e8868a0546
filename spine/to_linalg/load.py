"""tt.load.

Structured pointer, structured (or no) mask — a strided block copy the vectoriser can handle:

    %view = memref.reinterpret_cast %arg to offset: [%off], sizes: [128], strides: [1]
    %buf  = memref.alloc() : memref<128xf32>
    linalg.fill ins(%other) outs(%buf)                      (only when masked)
    linalg.copy ins(subview %view[%lo][%n]) outs(subview %buf[%lo][%n])
    %t    = bufferization.to_tensor %buf restrict writable

Anything else gathers element by element in a loop nest, each element guarded by its mask bit.
"""
from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, bufferization, linalg, memref, scf, tensor

from . import builders as b
from . import index_math as im
from . import materialize
from . import states as st
from .block_pointers import as_pointer_and_mask, boundary_check
from .converter import handles
from .memory import Window, each_unmasked_element, mask_bytes, pointer_view, split_operands
from .types import element_type, shape_of


PAD_NAN = 2  # triton's PaddingOption


@handles("tt.load")
def convert_load(conv, op):
    parts = split_operands(op, ("ptr", "mask", "other"))
    ptr = conv.state(parts["ptr"])
    mask = conv.state(parts["mask"]) if parts["mask"] is not None else None
    other = conv.state(parts["other"]) if parts["other"] is not None else None
    result = op.results[0]
    if isinstance(ptr, st.PointerState) and not ptr.shape:
        conv.bind(result, _scalar_load(conv, ptr, parts["mask"], parts["other"]))
        return
    if isinstance(ptr, st.BlockPointer):
        ptr, mask = as_pointer_and_mask(ptr, boundary_check(op))
        nan_padding = "padding" in op.attributes and ir.IntegerAttr(op.attributes["padding"]).value == PAD_NAN
        elem = ptr.element_type
        fill = arith.ConstantOp(elem, float("nan")).result if nan_padding else b.zero(elem)
        conv.bind(result, _structured_load(ptr, mask, fill))
        return
    if not isinstance(ptr, (st.PointerState, st.GatherPointer)):
        raise conv.unsupported(op, "load through a pointer of unknown origin")
    fill = _fill_scalar(other, element_type(result.type))
    shape = shape_of(result.type)
    if isinstance(ptr, st.PointerState) and (mask is None or isinstance(mask, st.MaskState)):
        value = _structured_load(ptr, mask, fill)
    else:
        gather = ptr if isinstance(ptr, st.GatherPointer) else materialize.gather_pointer(ptr)
        mask_value = mask_bytes(conv.concrete(parts["mask"])) if mask is not None else None
        value = _gather_load(gather, mask_value, fill, shape)
    if mask is not None and other is not None and not _is_splat(other):
        value = arith.SelectOp(conv.concrete(parts["mask"]), value, conv.concrete(parts["other"])).result
    conv.bind(result, value)


def _is_splat(state) -> bool:
    return isinstance(state, st.SplatValue) or (isinstance(state, st.AffineIndex) and state.is_uniform)


def _fill_scalar(other, elem: ir.Type) -> ir.Value:
    """The value masked-off lanes get: `other` when it is a splat, else zero (a select follows)."""
    if isinstance(other, st.SplatValue):
        return other.scalar
    if isinstance(other, st.AffineIndex) and other.is_uniform:
        return im.to_integer(other.offset, elem)
    return b.zero(elem)


def _tile_buffer(shape, elem) -> ir.Value:
    return memref.AllocOp(ir.MemRefType.get(list(shape), elem), [], []).result


def _as_tensor(buffer: ir.Value, shape, elem) -> ir.Value:
    return bufferization.ToTensorOp(ir.RankedTensorType.get(list(shape), elem), buffer,
                                    restrict=True, writable=True).result


def _structured_load(ptr: st.PointerState, mask, fill: ir.Value) -> ir.Value:
    view = pointer_view(ptr)
    buffer = _tile_buffer(ptr.shape, ptr.element_type)
    window = Window.of(mask, ptr.shape)
    if window is None:
        linalg.copy(view, outs=[buffer])
    else:
        _fill_unless_full(window, ptr.shape, fill, buffer)
        linalg.copy(b.memref_window(view, window.starts, window.sizes),
                    outs=[b.memref_window(buffer, window.starts, window.sizes)])
    return _as_tensor(buffer, ptr.shape, ptr.element_type)


def _fill_unless_full(window: Window, shape, fill: ir.Value, buffer: ir.Value) -> None:
    """Masked-off lanes get `fill`; most program instances see no masked-off lane, so test first."""
    partial = None
    for start, size, n in zip(window.starts, window.sizes, shape):
        if isinstance(start, int) and isinstance(size, int):
            if start == 0 and size == n:
                continue
            partial = arith.ConstantOp(ir.IntegerType.get_signless(1), 1).result
            break
        short = arith.CmpIOp(arith.CmpIPredicate.ne, im.as_value(size), im.const(n)).result
        partial = short if partial is None else arith.OrIOp(partial, short).result
    if partial is None:
        return
    branch = scf.IfOp(partial)
    with ir.InsertionPoint(branch.then_block):
        linalg.fill(fill, outs=[buffer])
        scf.YieldOp([])


def _gather_load(ptr: st.GatherPointer, mask, fill: ir.Value, shape) -> ir.Value:
    buffer = _tile_buffer(shape, ptr.element_type)
    if mask is not None:
        linalg.fill(fill, outs=[buffer])

    def load_one(ivs):
        offset = tensor.ExtractOp(ptr.offsets, ivs).result
        value = memref.LoadOp(ptr.base, [im.from_integer(offset)]).result
        memref.StoreOp(value, buffer, ivs)
    each_unmasked_element(shape, mask, load_one)
    return _as_tensor(buffer, shape, ptr.element_type)


def _scalar_load(conv, ptr: st.PointerState, mask_operand, other_operand) -> ir.Value:
    def load():
        return memref.LoadOp(ptr.base, [im.as_value(ptr.offset)]).result
    if mask_operand is None:
        return load()
    bit = conv.concrete(mask_operand)
    otherwise = conv.concrete(other_operand) if other_operand is not None else b.zero(ptr.element_type)
    branch = scf.IfOp(bit, [ptr.element_type], has_else=True)
    with ir.InsertionPoint(branch.then_block):
        scf.YieldOp([load()])
    with ir.InsertionPoint(branch.else_block):
        scf.YieldOp([otherwise])
    return branch.results[0]
