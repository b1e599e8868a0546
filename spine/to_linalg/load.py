"""tt.load.

Structured pointer, structured (or no) mask — a strided block copy the vectoriser can handle:

    %view = memref.reinterpret_cast %arg to offset: [%off], sizes: [128], strides: [1]
    %buf  = memref.alloc() : memref<128xf32>
    linalg.fill ins(%other) outs(%buf)                      (only when masked)
    linalg.copy ins(subview %view[%lo][%n]) outs(subview %buf[%lo][%n])
    %t    = bufferization.to_tensor %buf restrict writable

A load at the top of the kernel whose tile moves with the program id first prefetches the next program's
tile (prefetch.py).

Arguments the kernel never writes are read in place instead (bufferization.to_tensor of the view, not
writable), with the copy kept only for partial edge tiles, when the launcher has checked that they do not
overlap memory the kernel writes (to_linalg.convert_ttir's `direct_loads`).

Anything else gathers element by element in a loop nest, each element guarded by its mask bit.

With debug=True every access is first checked against its argument's extent (bounds.py).
"""
from __future__ import annotations

import math

from mlir import ir
from mlir.dialects import arith, bufferization, linalg, memref, scf, tensor

from ..ir_names import PADDING_ATTRIBUTE
from ..targets import STACK_TILE_BYTES

from . import bounds
from . import dot
from . import smt_dot
from . import builders as b
from . import index_math as im
from . import materialize
from . import states as st
from .block_pointers import as_pointer_and_mask, boundary_check
from .converter import handles
from .memory import (Window, each_unmasked_element, is_partial, mask_bytes, may_view_whole_tile, pointer_view,
                     spans, split_operands, tile_buffer, transpose_lanes)
from .prefetch import prefetch_next_program
from .tile_copy import copy_tile, transpose_block
from .types import element_bytes, element_type, shape_of


PAD_NAN = 2  # triton's PaddingOption
INFINITIES = {"neg_inf": float("-inf"), "inf": float("inf")}
LOAD = "load from"  # how bounds-check failures name the access


@handles("tt.load")
def convert_load(conv, op):
    parts = split_operands(op, ("ptr", "mask", "other"))
    ptr = conv.state(parts["ptr"])
    mask = conv.state(parts["mask"]) if parts["mask"] is not None else None
    other = conv.state(parts["other"]) if parts["other"] is not None else None
    result = op.results[0]
    if isinstance(ptr, st.PointerState) and not ptr.shape:
        conv.bind(result, _scalar_load(conv, op, ptr, parts["mask"], parts["other"]))
        return
    if isinstance(ptr, st.BlockPointer):
        ptr, mask = as_pointer_and_mask(ptr, boundary_check(op))
        fill = _block_pointer_padding(op, ptr.element_type)
        conv.bind(result, _structured_load(conv, op, ptr, mask, fill, _reads_in_place(conv, ptr, result)))
        return
    if not isinstance(ptr, (st.PointerState, st.GatherPointer, st.WrappedPointer)):
        raise conv.unsupported(op, "load through a pointer of unknown origin")
    fill = _fill_scalar(other, element_type(result.type))
    if isinstance(ptr, st.WrappedPointer):
        value = _wrapped_load(conv, op, parts, ptr, mask, fill)
    else:
        in_place = isinstance(ptr, st.PointerState) and _reads_in_place(conv, ptr, result)
        value = _tile_load(conv, op, parts, ptr, mask, fill, in_place)
    if mask is not None and other is not None and not _is_splat(other):
        value = arith.SelectOp(conv.concrete(parts["mask"]), value, conv.concrete(parts["other"])).result
    conv.bind(result, value)


def _tile_load(conv, op, parts, ptr, mask, fill: ir.Value, in_place: bool) -> ir.Value:
    """The tile through a structured pointer (a strided block copy, or a view where it is read in place)
    when its mask is a MaskState too, else a gather."""
    if isinstance(ptr, st.PointerState) and (mask is None or isinstance(mask, st.MaskState)):
        return _structured_load(conv, op, ptr, mask, fill, in_place)
    gather = ptr if isinstance(ptr, st.GatherPointer) else materialize.gather_pointer(ptr)
    mask_value = mask_bytes(conv.concrete(parts["mask"])) if mask is not None else None
    return _gather_load(conv, op, gather, mask_value, fill, shape_of(op.results[0].type))


def _wrapped_load(conv, op, parts, ptr: st.WrappedPointer, mask, fill: ir.Value) -> ir.Value:
    """A tile through a pointer whose remainder wraps nowhere in it where `holds` (wraparound.py): the
    strided block copy there (or the tile read in place, unmasked), a gather of the exact addresses
    otherwise. Nothing learnt inside a branch (a zero-padded tile's row count) is kept for the ops after
    it: a masked tile is copied, so that its rows past the mask are zeros as the ops after it expect."""
    result = op.results[0]
    in_place = mask is None and _reads_in_place(conv, ptr.fast, result)
    branch = scf.IfOp(ptr.holds, [result.type], has_else=True)
    with ir.InsertionPoint(branch.then_block):
        scf.YieldOp([_tile_load(conv, op, parts, ptr.fast, mask, fill, in_place)])
    with ir.InsertionPoint(branch.else_block):
        scf.YieldOp([_tile_load(conv, op, parts, materialize.gather_pointer(ptr), mask, fill, in_place=False)])
    conv.zero_padded_rows.pop(result, None)
    return branch.results[0]


def _block_pointer_padding(op, elem: ir.Type) -> ir.Value:
    """What a block-pointer load reads outside the tensor: zero, NaN (triton's padding options) or, for
    spine-triton's "neg_inf" and "inf" (spine/language/frontend.py's mark), an infinity."""
    mark = ir.StringAttr(op.attributes[PADDING_ATTRIBUTE]).value if PADDING_ATTRIBUTE in op.attributes else None
    infinite = INFINITIES.get(mark)
    if infinite is not None:
        return arith.ConstantOp(elem, infinite).result
    if "padding" in op.attributes and ir.IntegerAttr(op.attributes["padding"]).value == PAD_NAN:
        return arith.ConstantOp(elem, float("nan")).result
    return b.zero(elem)


def _is_splat(state) -> bool:
    return isinstance(state, st.SplatValue) or (isinstance(state, st.AffineIndex) and state.is_uniform)


def _fill_scalar(other, elem: ir.Type) -> ir.Value:
    """The value masked-off lanes get: `other` when it is a splat, else zero (a select follows)."""
    if isinstance(other, st.SplatValue):
        return other.scalar
    if isinstance(other, st.AffineIndex) and other.is_uniform:
        return im.to_integer(other.offset, elem)
    return b.zero(elem)


def _as_tensor(buffer: ir.Value, shape, elem) -> ir.Value:
    return bufferization.ToTensorOp(ir.RankedTensorType.get(list(shape), elem), buffer,
                                    restrict=True, writable=True).result


def _reads_in_place(conv, ptr: st.PointerState, result: ir.Value) -> bool:
    """Read in place unless the tile feeds a dot's generic loops: they read each operand element many
    times, from a contiguous local tile far faster than through the argument's runtime strides. The packed
    matmul packs its operands itself (or reads A's rows where they are), so a copy first is only work.
    A tile the target transposes in registers (tile_copy.py) is read in place only as an fp32 B, which
    packing transposes the same way (smt_panels.pack_b); as A it is copied, transposed, first."""
    if conv.argument_of.get(ptr.base) not in conv.direct_load_args:
        return False
    tile_type = ir.MemRefType.get(list(ptr.shape), ptr.element_type)
    transposed = transpose_block(tile_type, ptr.strides, transpose_lanes(conv)) != 0
    for use in result.uses:
        op = use.owner.operation
        if op.name != "tt.dot":
            continue
        if not dot.is_packed(conv, op):
            return False
        if transposed and not (use.operand_number == 1 and str(ptr.element_type) == "f32"):
            return False
    return True


def _structured_load(conv, op, ptr: st.PointerState, mask, fill: ir.Value, in_place: bool) -> ir.Value:
    prefetch_next_program(conv, op, ptr)
    window = bounds.guard_window(conv, op, ptr, Window.of(mask, ptr.shape), LOAD)
    _record_zero_padding(conv, op.results[0], window, fill)
    tile_type = ir.RankedTensorType.get(list(ptr.shape), ptr.element_type)
    if in_place and window is None:
        return _view_as_tensor(pointer_view(ptr), tile_type)
    if in_place and may_view_whole_tile(ptr):
        edge, edge_shape = window, ptr.shape
        if _rows_past_window_unread(conv, op.results[0]):
            # Its consumers never read the rows past the window's: only a short column range needs a copy.
            conv.rows_read_in_place.add(op.results[0])
            edge, edge_shape = Window(window.starts[1:], window.sizes[1:]), ptr.shape[1:]
            if all(spans(start, size, n) for start, size, n in zip(edge.starts, edge.sizes, edge_shape)):
                return _view_as_tensor(pointer_view(ptr), tile_type)
        # Most program instances see a full window: read those in place, copy only the edge tiles. The
        # edge buffer is allocated once at function entry (on the stack up to STACK_TILE_BYTES): the two
        # branches then yield buffers that nothing owns, which buffer deallocation handles statically.
        alloc = memref.AllocaOp if _tile_bytes(ptr) <= STACK_TILE_BYTES else memref.AllocOp
        with ir.InsertionPoint.at_block_begin(conv_entry_block(ptr.base)):
            buffer = alloc(ir.MemRefType.get(list(ptr.shape), ptr.element_type), [], []).result
        branch = scf.IfOp(is_partial(edge, edge_shape), [tile_type], has_else=True)
        with ir.InsertionPoint(branch.else_block):
            view = pointer_view(ptr)
            scf.YieldOp([_view_as_tensor(view, tile_type)])
        with ir.InsertionPoint(branch.then_block):
            scf.YieldOp([_copied_tile(ptr, window, fill, _in_layout_of(buffer, view.type))])
        return branch.results[0]
    return _copied_tile(ptr, window, fill, lanes=transpose_lanes(conv))


def _record_zero_padding(conv, result: ir.Value, window, fill: ir.Value) -> None:
    """Remember how many leading rows of a 2-D tile its mask keeps when the rows after them are all zero
    fill: a packed matmul skips them (smt_dot.py)."""
    if (window is None or len(window.starts) != 2 or window.starts[0] != 0 or isinstance(window.sizes[0], int)
            or not b.is_positive_zero(fill)):
        return
    conv.zero_padded_rows[result] = im.as_value(window.sizes[0])


def _rows_past_window_unread(conv, result: ir.Value) -> bool:
    """Whether every use of a zero-padded tile is as A of a packed tl.dot that never reads A's rows past
    the padding's start (smt_dot.reads_a_below_bound): the rows there may then be the matrix's next ones,
    or past its end, instead of zeros."""
    if result not in conv.zero_padded_rows:
        return False
    uses = list(result.uses)
    return bool(uses) and all(
        use.operand_number == 0 and dot.is_packed(conv, use.owner.operation)
        and smt_dot.reads_a_below_bound(use.owner.operation) for use in uses)


def _in_layout_of(buffer: ir.Value, view_type: ir.Type) -> ir.Value:
    """The edge buffer cast to the in-place view's layout where they differ only in the offset (a dense
    view): both branches then yield one buffer type, and the tile's consumers are not compiled for fully
    dynamic strides, which would keep the vectoriser from their loops."""
    view_type = ir.MemRefType(view_type)
    strides, offset = view_type.get_strides_and_offset()
    dense, expected = [], 1
    for n in reversed(list(ir.MemRefType(buffer.type).shape)):
        dense.insert(0, expected)
        expected *= n
    if offset not in (0, b.DYNAMIC_STRIDE) or list(strides) != dense:
        return buffer
    return memref.CastOp(view_type, buffer).result


def _view_as_tensor(view: ir.Value, tile_type: ir.Type) -> ir.Value:
    # Not writable: bufferization copies before any in-place update, so argument memory is only read.
    return bufferization.ToTensorOp(tile_type, view, restrict=True).result


def conv_entry_block(argument: ir.Value) -> ir.Block:
    """The entry block of the function a kernel argument belongs to."""
    return argument.owner


def _tile_bytes(ptr: st.PointerState) -> int:
    return math.prod(ptr.shape) * element_bytes(ptr.element_type)


def _copied_tile(ptr: st.PointerState, window, fill: ir.Value, buffer=None, lanes: int = 0) -> ir.Value:
    """`lanes`: transpose a tile read across its source's rows in registers, by blocks up to that wide
    (tile_copy.py), whenever the window is whole at run time; edge tiles are copied element by element."""
    if buffer is None:
        buffer = tile_buffer(ptr.shape, ptr.element_type)
    block = transpose_block(ir.MemRefType(buffer.type), ptr.strides, lanes)
    if window is None:
        copy_tile(pointer_view(ptr), buffer, ptr.strides, block)
    elif block:
        branch = scf.IfOp(is_partial(window, ptr.shape), [], has_else=True)
        with ir.InsertionPoint(branch.then_block):
            _copy_window(ptr, window, fill, buffer)
            scf.YieldOp([])
        with ir.InsertionPoint(branch.else_block):
            copy_tile(pointer_view(ptr), buffer, ptr.strides, block)
            scf.YieldOp([])
    else:
        _copy_window(ptr, window, fill, buffer)
    return _as_tensor(buffer, ptr.shape, ptr.element_type)


def _copy_window(ptr: st.PointerState, window, fill: ir.Value, buffer: ir.Value) -> None:
    _fill_unless_full(window, ptr.shape, fill, buffer)
    copy_tile(pointer_view(ptr, window), b.memref_window(buffer, window.starts, window.sizes), ptr.strides)


def _fill_unless_full(window: Window, shape, fill: ir.Value, buffer: ir.Value) -> None:
    """Masked-off lanes get `fill`; most program instances see no masked-off lane, so test first."""
    branch = scf.IfOp(is_partial(window, shape))
    with ir.InsertionPoint(branch.then_block):
        if len(shape) == 1 and window.starts[0] == 0 and not isinstance(window.sizes[0], int):
            # a prefix window: only the lanes after it are masked off
            size = im.as_value(window.sizes[0])
            rest = arith.SubIOp(im.const(shape[0]), size).result
            linalg.fill(fill, outs=[b.memref_window(buffer, [size], [rest])])
        else:
            linalg.fill(fill, outs=[buffer])
        scf.YieldOp([])


def _gather_load(conv, op, ptr: st.GatherPointer, mask, fill: ir.Value, shape) -> ir.Value:
    buffer = tile_buffer(shape, ptr.element_type)
    if mask is not None or conv.bounds is not None:  # lanes a bounds check skips read `fill` too
        linalg.fill(fill, outs=[buffer])

    def load_one(ivs):
        offset = im.from_integer(tensor.ExtractOp(ptr.offsets, ivs).result)

        def load():
            memref.StoreOp(memref.LoadOp(ptr.base, [offset]).result, buffer, ivs)
        bounds.guard_element(conv, op, ptr.base, offset, LOAD, load)
    each_unmasked_element(shape, mask, load_one)
    return _as_tensor(buffer, shape, ptr.element_type)


def _scalar_load(conv, op, ptr: st.PointerState, mask_operand, other_operand) -> ir.Value:
    def load():
        offset = im.as_value(ptr.offset)
        return bounds.guard_value(conv, op, ptr.base, offset, LOAD, ptr.element_type,
                                  lambda: memref.LoadOp(ptr.base, [offset]).result)
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
