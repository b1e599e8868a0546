"""A product's packed B panel kept for the rest of a launch by the thread that packed it: the calls a
product's twin makes where compiler/shared_panels.py has shown B's memory is written by no program
(PackedMatmul.shared_b). The runtime (cpp/shared_panels.h) answers a request by the source's address and
strides and a word naming the packing with a 64-byte aligned buffer of the thread's, its lowest bit set
when an earlier program on the thread packed that source that way in this launch.

Panels are reached by address: packers that store through pointers take the address itself; packers that
store into a memref get a view of the runtime's buffer (`memref_at`)."""
from __future__ import annotations

import hashlib
from typing import Callable

from mlir import ir
from mlir.dialects import arith, llvm, memref, scf

from ..ir_walk import named
from . import index_math as im
from .smt_panels import add, mul

FUNCTION = "spine_shared_panel"        # cpp/shared_panels.h


def declare(module_body: ir.Block) -> None:
    """`llvm.func @spine_shared_panel(i64 source, i64 row step, i64 column step, i64 packing, i64 bytes) -> i64`,
    the runtime's (bound when the kernel is loaded)."""
    if named(module_body, FUNCTION) is not None:
        return
    with ir.InsertionPoint.at_block_begin(module_body), ir.Location.unknown():
        llvm.LLVMFuncOp(FUNCTION, ir.TypeAttr.get(ir.Type.parse("!llvm.func<i64 (i64, i64, i64, i64, i64)>")))


def packing_word(*what) -> int:
    """A 63-bit word naming a packing: its layout's fields hashed (the runtime compares it, never reads it)."""
    return int.from_bytes(hashlib.sha256(repr(what).encode()).digest()[:8], "little") >> 1


def panel_address(source: ir.Value, first_row, element_bytes: int, packing: int, size, may_share: ir.Value,
                  pack: Callable, local_address: ir.Value) -> ir.Value:
    """The address (an index) a panel is read from: where `may_share` holds and the runtime keeps panels,
    the thread's kept panel for `source` (a 2-D view) from row `first_row` on, packed this way (`packing`), of
    `size` bytes; else the call's own panel at `local_address`. `pack(address)` fills it unless the runtime
    says it holds it already."""
    word = ir.IntegerType.get_signless(64)
    asked = scf.IfOp(may_share, [word], has_else=True)
    with ir.InsertionPoint(asked.then_block):
        meta = memref.ExtractStridedMetadataOp(source)
        element = add(meta.offset, mul(first_row, meta.strides[0]))
        start = add(memref.ExtractAlignedPointerAsIndexOp(meta.base_buffer).result, mul(element, element_bytes))
        arguments = [_i64(start), _i64(meta.strides[0]), _i64(meta.strides[1]), arith.ConstantOp(word, packing).result,
                     _i64(size)]
        scf.YieldOp([llvm.CallOp(word, arguments, [], [], callee=ir.FlatSymbolRefAttr.get(FUNCTION)).result])
    with ir.InsertionPoint(asked.else_block):
        scf.YieldOp([arith.ConstantOp(word, 0).result])          # as the runtime's answer where it keeps none
    got = asked.results[0]
    found_bit = arith.AndIOp(got, arith.ConstantOp(word, 1).result).result
    kept = arith.IndexCastUIOp(ir.IndexType.get(), arith.XOrIOp(got, found_bit).result).result
    declined = arith.CmpIOp(arith.CmpIPredicate.eq, got, arith.ConstantOp(word, 0).result).result
    at = arith.SelectOp(declined, local_address, kept).result        # 0: the call's own panel
    missing = scf.IfOp(arith.CmpIOp(arith.CmpIPredicate.eq, found_bit, arith.ConstantOp(word, 0).result).result)
    with ir.InsertionPoint(missing.then_block):
        pack(at)
        scf.YieldOp([])
    return at


def memref_at(address: ir.Value, element: ir.Type, size) -> ir.Value:
    """A 1-D memref of `size` elements at `address` (an index): its LLVM descriptor, cast to the memref
    type, which the lowering to LLVM folds back into the pointer (no upstream op makes a memref of a
    pointer)."""
    ptr = ir.Type.parse("!llvm.ptr")
    word = ir.IntegerType.get_signless(64)
    descriptor = ir.Type.parse("!llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>")
    pointer = llvm.IntToPtrOp(ptr, _i64(address)).result
    value = llvm.UndefOp(descriptor).result
    fields = [([0], pointer), ([1], pointer), ([2], arith.ConstantOp(word, 0).result), ([3, 0], _i64(size)),
              ([4, 0], arith.ConstantOp(word, 1).result)]
    for position, field in fields:
        value = llvm.InsertValueOp(value, field, position).result
    memref_type = ir.MemRefType.get([ir.ShapedType.get_dynamic_size()], element)
    return ir.Operation.create("builtin.unrealized_conversion_cast", results=[memref_type], operands=[value]).result


def _i64(index) -> ir.Value:
    return arith.IndexCastOp(ir.IntegerType.get_signless(64), im.as_value(index)).result
