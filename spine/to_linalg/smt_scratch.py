"""smt scratch buffers (`smt.alloc`): the reserved `scratch` call becomes a buffer private to the program
instance, and its result the buffer's base pointer, which views (block pointers), loads and stores then use
exactly as a kernel argument's.

    %p = tt.call @"spine.language.smt.reference.scratch__..."() {smt.numel = 4096 : i32} : () -> !tt.ptr<f16>
  becomes
    %buf = memref.alloca() : memref<4096xf16>           (in the entry block; memref.alloc above the stack
    %p   = memref.cast %buf : memref<?xf16>              tile limit, where the call is)

Buffers are not kernel arguments: stores to them are not copied back to the caller (store.py), and debug
bounds checks, which test accesses against argument extents, leave them out (bounds.py); a view cannot
leave its buffer except through a boundary-unchecked access of a block pointer past its end, which the
smt frontend's static view checks rule out for compile-time offsets.
"""
from __future__ import annotations

from mlir import ir
from mlir.dialects import memref

from ..targets import STACK_TILE_BYTES
from . import states as st
from .smt_calls import lowers
from .types import element_bytes, memref_of, pointee_type


def _bytes(numel: int, elem: ir.Type) -> int:
    return numel * element_bytes(elem)


@lowers("scratch")
def convert_scratch(conv, op):
    numel = ir.IntegerAttr(op.attributes["smt.numel"]).value
    elem = pointee_type(op.results[0].type)
    buffer_type = ir.MemRefType.get([numel], elem)
    if _bytes(numel, elem) <= STACK_TILE_BYTES:
        with ir.InsertionPoint.at_block_begin(conv.entry_block):
            buffer = memref.AllocaOp(buffer_type, [], [], alignment=64).result
    else:
        buffer = memref.AllocOp(buffer_type, [], [], alignment=64).result
    base = memref.CastOp(memref_of(elem), buffer).result
    conv.bind(op.results[0], st.PointerState(base, elem, (), 0, ()))
