"""tt.store: the mirror of load.py. Structured stores write the masked window of the value into a strided
view of the argument (bufferization.materialize_in_destination); other stores scatter element by element.
Every pointer argument stored through is recorded, so the QEMU runtime copies back only those. With
debug=True every store is first checked against its argument's extent (bounds.py)."""
from __future__ import annotations

from mlir import ir
from mlir.dialects import bufferization, memref, scf, tensor

from . import bounds
from . import builders as b
from . import index_math as im
from . import materialize
from . import states as st
from .block_pointers import as_pointer_and_mask, boundary_check
from .converter import handles
from .memory import Window, each_unmasked_element, mask_bytes, pointer_view, split_operands

STORE = "store to"  # how bounds-check failures name the access


@handles("tt.store")
def convert_store(conv, op):
    parts = split_operands(op, ("ptr", "value", "mask"))
    ptr = conv.state(parts["ptr"])
    mask = conv.state(parts["mask"]) if parts["mask"] is not None else None
    if isinstance(ptr, st.BlockPointer):
        ptr, mask = as_pointer_and_mask(ptr, boundary_check(op))
    if not isinstance(ptr, (st.PointerState, st.GatherPointer)):
        raise conv.unsupported(op, "store through a pointer of unknown origin")
    if ptr.base in conv.argument_of:   # not an smt scratch buffer (smt_scratch.py)
        conv.written_args.add(conv.argument_of[ptr.base])
    value = conv.concrete(parts["value"])
    if isinstance(ptr, st.PointerState) and not ptr.shape:
        _scalar_store(conv, op, ptr, value, parts["mask"])
    elif isinstance(ptr, st.PointerState) and (mask is None or isinstance(mask, st.MaskState)):
        _structured_store(conv, op, ptr, value, mask)
    else:
        gather = ptr if isinstance(ptr, st.GatherPointer) else materialize.gather_pointer(ptr)
        _scatter_store(conv, op, gather, value,
                       mask_bytes(conv.concrete(parts["mask"])) if mask is not None else None)


def _structured_store(conv, op, ptr: st.PointerState, value: ir.Value, mask) -> None:
    window = bounds.guard_window(conv, op, ptr, Window.of(mask, ptr.shape), STORE)
    view = pointer_view(ptr, window)
    if window is not None:
        value = b.tensor_window(value, window.starts, window.sizes)
    bufferization.MaterializeInDestinationOp(None, value, view, writable=True)


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
