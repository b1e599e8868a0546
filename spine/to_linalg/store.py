"""tt.store: the mirror of load.py. Structured stores write the masked window of the value into a strided
view of the argument (bufferization.materialize_in_destination), a whole tile written across the
argument's rows by blocks transposed in registers on x86 (tile_copy.py); other stores scatter element by
element.
Every pointer argument stored through is recorded, so the QEMU runtime copies back only those. With
debug=True every store is first checked against its argument's extent (bounds.py)."""
from __future__ import annotations

import math

from mlir import ir
from mlir.dialects import bufferization, memref, scf, tensor

from ..ir_walk import constant_int
from . import bounds
from . import builders as b
from . import index_math as im
from . import materialize
from . import states as st
from .block_pointers import as_pointer_and_mask, boundary_check
from .converter import handles
from .memory import (Window, each_unmasked_element, is_partial, mask_bytes, may_view_whole_tile, pointer_view,
                     split_operands, tile_buffer, transpose_lanes)
from .tile_copy import copy_by_blocks, transpose_block, transposed
from .types import element_bytes

STORE = "store to"  # how bounds-check failures name the access


@handles("tt.store")
def convert_store(conv, op):
    parts = split_operands(op, ("ptr", "value", "mask"))
    ptr = conv.state(parts["ptr"])
    mask = conv.state(parts["mask"]) if parts["mask"] is not None else None
    if isinstance(ptr, st.BlockPointer):
        ptr, mask = as_pointer_and_mask(ptr, boundary_check(op))
    if not isinstance(ptr, (st.PointerState, st.GatherPointer, st.WrappedPointer)):
        raise conv.unsupported(op, "store through a pointer of unknown origin")
    base = ptr.fast.base if isinstance(ptr, st.WrappedPointer) else ptr.base
    if base in conv.argument_of:   # not an smt scratch buffer (smt_scratch.py)
        conv.written_args.add(conv.argument_of[base])
    value = conv.concrete(parts["value"])
    if isinstance(ptr, st.PointerState) and not ptr.shape:
        _scalar_store(conv, op, ptr, value, parts["mask"])
    elif isinstance(ptr, st.WrappedPointer):
        # a remainder that wraps nowhere in the tile where `holds` (wraparound.py): structured there
        branch = scf.IfOp(ptr.holds, [], has_else=True)
        with ir.InsertionPoint(branch.then_block):
            _tile_store(conv, op, parts, ptr.fast, value, mask)
            scf.YieldOp([])
        with ir.InsertionPoint(branch.else_block):
            _tile_store(conv, op, parts, materialize.gather_pointer(ptr), value, mask)
            scf.YieldOp([])
    else:
        _tile_store(conv, op, parts, ptr, value, mask)


def _tile_store(conv, op, parts, ptr, value: ir.Value, mask) -> None:
    """A tile through a structured pointer with a MaskState mask (or none): into a strided view; any other
    element by element."""
    if isinstance(ptr, st.PointerState) and (mask is None or isinstance(mask, st.MaskState)):
        _structured_store(conv, op, ptr, value, mask)
    else:
        gather = ptr if isinstance(ptr, st.GatherPointer) else materialize.gather_pointer(ptr)
        _scatter_store(conv, op, gather, value,
                       mask_bytes(conv.concrete(parts["mask"])) if mask is not None else None)


def _structured_store(conv, op, ptr: st.PointerState, value: ir.Value, mask) -> None:
    window = bounds.guard_window(conv, op, ptr, Window.of(mask, ptr.shape), STORE)
    block = transpose_block(ir.MemRefType.get(list(ptr.shape), ptr.element_type), ptr.strides,
                            transpose_lanes(conv))
    if not block or conv.bounds is not None or not may_view_whole_tile(ptr):
        _store_window(ptr, value, window)
        return
    buffer = tile_buffer(ptr.shape, ptr.element_type)   # before the branch: a top-level tile goes on the stack
    if window is None:
        _store_by_blocks(ptr, value, buffer, block)
        return
    branch = scf.IfOp(is_partial(window, ptr.shape), [], has_else=True)
    with ir.InsertionPoint(branch.then_block):
        _store_window(ptr, value, window)
        scf.YieldOp([])
    with ir.InsertionPoint(branch.else_block):
        _store_by_blocks(ptr, value, buffer, block)
        scf.YieldOp([])


def _store_window(ptr: st.PointerState, value: ir.Value, window) -> None:
    view = pointer_view(ptr, window)
    if window is not None:
        value = b.tensor_window(value, window.starts, window.sizes)
    bufferization.MaterializeInDestinationOp(None, value, view, writable=True)


def _store_by_blocks(ptr: st.PointerState, value: ir.Value, buffer: ir.Value, block: int) -> None:
    """A whole tile written across its destination's rows (a transposed store: stride 1 along the tile's
    first dimension), as tile_copy.py reads one: element by element, each store would go to another row
    of the destination (x86 has no strided stores but scatters); by blocks transposed in registers, each
    store writes a run of a row."""
    bufferization.MaterializeInDestinationOp(None, value, buffer, writable=True)
    copy_by_blocks(buffer, transposed(pointer_view(ptr)), block)


def _scatter_store(conv, op, ptr: st.GatherPointer, value: ir.Value, mask) -> None:
    def store_one(ivs):
        offset = tensor.ExtractOp(ptr.offsets, ivs).result
        element = tensor.ExtractOp(value, ivs).result
        index = im.from_integer(offset)
        bounds.guard_element(conv, op, ptr.base, index, STORE, lambda: memref.StoreOp(element, ptr.base, [index]))
    each_unmasked_element(ptr.shape, mask, store_one)


def _scalar_store(conv, op, ptr: st.PointerState, value: ir.Value, mask_operand) -> None:
    def store():
        offset = im.as_value(ptr.offset)
        bounds.guard_element(conv, op, ptr.base, offset, STORE, lambda: memref.StoreOp(value, ptr.base, [offset]))
    if mask_operand is None:
        store()
        return
    branch = scf.IfOp(conv.concrete(mask_operand))
    with ir.InsertionPoint(branch.then_block):
        store()
        scf.YieldOp([])


def bytes_stored_per_program(tt_func) -> int:
    """A lower bound on the bytes one program stores through its tensor stores: each store's tile, times
    the trip counts of the loops around it where they are constants (a loop whose count is known only at
    run time counts once). The code generator makes a launch's stores streaming when its programs
    together write more than a cache keeps (compiler/streaming_stores.py)."""
    total = 0

    def visit(op):
        nonlocal total
        if op.operation.name == "tt.store":
            value = op.operation.operands[1].type
            if isinstance(value, ir.RankedTensorType) and value.has_static_shape:
                total += math.prod(value.shape) * element_bytes(value.element_type) * _repeats(op.operation)
        return ir.WalkResult.ADVANCE
    tt_func.operation.walk(visit)
    return total


def _repeats(op: ir.Operation) -> int:
    """How many times op runs per program, as far as constant loop bounds tell."""
    count = 1
    parent = op.parent
    while parent is not None and parent.name != "tt.func":
        if parent.name == "scf.for":
            lower, upper, step = (constant_int(v) for v in list(parent.operands)[:3])
            if None not in (lower, upper, step) and step > 0:
                count *= max(0, -(-(upper - lower) // step))
        parent = parent.parent
    return count

