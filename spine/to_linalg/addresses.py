"""Raw addresses in the conversion: a memref over the memory at an i64 address (a pointer made from an
integer), and the address a structured pointer's first element is at (a pointer chosen among arguments by
an scf.if, `tt.ptr_to_int`). Below pointers.py and control_flow.py, which both use them."""
from __future__ import annotations

from dataclasses import replace

from mlir import ir
from mlir.dialects import arith

from . import index_math as im
from . import states as st


def memref_at(address: ir.Value, element: ir.Type) -> ir.Value:
    """A memref<?xT> over the memory at the i64 `address`: the LLVM descriptor the memref lowering uses,
    built directly (MLIR's memref dialect has no op that views a raw address) and cast to the memref type;
    the cast disappears when the memref ops are lowered to the same descriptor. Its size is unknown: the
    largest a 64-bit address space allows."""
    from mlir.dialects import builtin, llvm
    from .types import memref_of
    pointer = llvm.IntToPtrOp(ir.Type.parse("!llvm.ptr"), address).result
    descriptor_type = ir.Type.parse("!llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>")
    descriptor = llvm.PoisonOp(descriptor_type).result
    # allocated and aligned pointer, offset, size, stride
    for position, value in (([0], pointer), ([1], pointer), ([2], _i64(0)), ([3, 0], _i64(1 << 62)), ([4, 0], _i64(1))):
        descriptor = llvm.InsertValueOp(descriptor, value, position).result
    return builtin.UnrealizedConversionCastOp([memref_of(element)], [descriptor]).results[0]


def address_of(pointer: st.PointerState) -> ir.Value:
    """The i64 address a pointer's first element is at: its memref's data (and that memref's own offset)
    plus the pointer's offset, for a pointer into an argument or a buffer as for one made from an integer."""
    from mlir.dialects import memref
    if pointer.address is not None:
        return integer_of(pointer, ir.IntegerType.get_signless(64))
    from .types import element_bytes
    i64 = ir.IntegerType.get_signless(64)
    data = arith.IndexCastOp(i64, memref.ExtractAlignedPointerAsIndexOp(pointer.base).result).result
    own_offset = memref.ExtractStridedMetadataOp(pointer.base).results[1]
    elements = arith.IndexCastOp(i64, arith.AddIOp(own_offset, im.as_value(pointer.offset)).result).result
    return arith.AddIOp(data, arith.MulIOp(elements, _i64(element_bytes(pointer.element_type))).result).result


def pointer_at(address: ir.Value, template: st.PointerState) -> st.PointerState:
    """The pointer of `template`'s shape and strides whose first element is at the i64 `address`."""
    return replace(template, base=memref_at(address, template.element_type), offset=0, address=address)


def integer_of(pointer: st.PointerState, ty: ir.Type) -> ir.Value:
    """The integer a pointer made from one is, after the offsets added to it since."""
    from .types import element_bytes
    i64 = ir.IntegerType.get_signless(64)
    offset = arith.IndexCastOp(i64, im.as_value(pointer.offset)).result
    value = arith.AddIOp(pointer.address, arith.MulIOp(offset, _i64(element_bytes(pointer.element_type))).result).result
    if ty != i64:
        value = arith.TruncIOp(ty, value).result
    return value


def _i64(value: int) -> ir.Value:
    return arith.ConstantOp(ir.IntegerType.get_signless(64), value).result
