"""tt.addptr: pointer arithmetic on PointerState, falling back to GatherPointer when the offsets are not
affine (e.g. `ptr + idx_loaded_from_memory`)."""
from __future__ import annotations

from dataclasses import replace

from mlir import ir
from mlir.dialects import arith

from ..ir_types import bits
from . import address_origins
from . import index_math as im
from . import materialize
from . import states as st
from . import wraparound
from .addresses import address_of, memref_at
from ..kernel_facts import UNTRACED_ADDRESS
from .converter import handles


def _as_gather(state) -> st.GatherPointer:
    return state if isinstance(state, st.GatherPointer) else materialize.gather_pointer(state)


def _offsets_i64(value: ir.Value) -> ir.Value:
    i64 = ir.IntegerType.get_signless(64)
    elem = ir.RankedTensorType(value.type).element_type
    if ir.IntegerType(elem).width == 64:
        return value
    ty = ir.RankedTensorType.get(list(value.type.shape), i64)
    return arith.ExtSIOp(ty, value).result


@handles("tt.addptr")
def convert_addptr(conv, op):
    ptr = conv.state(op.operands[0])
    offset = conv.state(op.operands[1])
    result = op.results[0]
    if isinstance(ptr, st.PointerState) and not ptr.shape:
        # scalar pointer + scalar integer
        conv.bind(result, replace(ptr, offset=im.add(ptr.offset, im.from_integer(conv.concrete(op.operands[1])))))
        return
    if isinstance(ptr, st.PointerState) and isinstance(offset, st.AffineIndex):
        conv.bind(result, st.offset_pointer(ptr, offset))
        return
    if isinstance(ptr, st.WrappedPointer) or isinstance(offset, st.WrappedIndex):
        wrapped = wraparound.offset_pointer(ptr, offset)   # a remainder that wraps nowhere in the tile
        if wrapped is not None:
            conv.bind(result, wrapped)
            return
    if not isinstance(ptr, (st.PointerState, st.GatherPointer, st.WrappedPointer)):
        raise conv.unsupported(op, "pointer of unknown origin")
    gather = _as_gather(ptr)
    offsets = arith.AddIOp(gather.offsets, _offsets_i64(conv.concrete(op.operands[1]))).result
    conv.bind(result, replace(gather, offsets=offsets))


@handles("tt.int_to_ptr")
def convert_int_to_ptr(conv, op):
    """A scalar pointer made from an integer (a pointer table's entry: grouped GEMM, MoE) addresses memory
    at that address, as a memref of its own; a tensor of such pointers only travels (selects, back to
    integers)."""
    from .types import is_pointer, pointee_type
    address = conv.concrete(op.operands[0])
    result = op.results[0]
    if not isinstance(result.type, ir.ShapedType) and is_pointer(result.type) and bits(pointee_type(result.type)):
        element = pointee_type(result.type)
        conv.integer_addresses = True
        found = address_origins.origins(op.operands[0])
        conv.address_args |= {UNTRACED_ADDRESS} if found is None else found
        conv.bind(result, st.PointerState(memref_at(address, element), element, (), 0, (), address=address))
        return
    conv.bind(result, st.IntegerAddress(address))


@handles("tt.ptr_to_int")
def convert_ptr_to_int(conv, op):
    address = conv.state(op.operands[0])
    result_type = op.results[0].type
    if isinstance(address, st.PointerState) and not address.shape:
        # made from an integer, or into an argument (`if weight_ptr:` in FlagGems' batch norm)
        value = address_of(address)
        if result_type != value.type:
            value = arith.TruncIOp(result_type, value).result
        conv.bind(op.results[0], value)
        return
    if not isinstance(address, st.IntegerAddress) or address.value.type != result_type:
        raise conv.unsupported(op, "the addresses of a tensor of pointers into an argument")
    conv.bind(op.results[0], address.value)


@handles("tt.bitcast")
def convert_bitcast(conv, op):
    """Value bitcasts are arith.bitcast. A pointer bitcast views the argument as the new element type; the
    offsets and strides are rescaled to its width (`out.to(tl.pointer_type(tl.float64))` on an fp32 tensor
    addresses 8-byte elements: fp32 element 2k is f64 element k)."""
    from .types import is_pointer, pointee_type
    source = conv.state(op.operands[0])
    result = op.results[0]
    if not is_pointer(result.type):
        conv.bind(result, arith.BitcastOp(result.type, conv.concrete(op.operands[0])).result)
        return
    new_elem = pointee_type(result.type)
    if not isinstance(source, (st.PointerState, st.GatherPointer)) or not bits(new_elem):
        raise conv.unsupported(op, "a pointer cast of a pointer of unknown origin")
    if source.element_type != new_elem:
        from .function import argument_view
        source = _rescaled(source, bits(source.element_type), bits(new_elem))
        view = (memref_at(source.address, new_elem) if getattr(source, "address", None) is not None
                else argument_view(conv, source.base, new_elem))
        source = replace(source, base=view, element_type=new_elem)
    conv.bind(result, source)


def _rescaled(state, old_width: int, new_width: int):
    """`state`'s offsets in elements of `new_width` bits instead of `old_width` (a pointer into the middle
    of a wider element rounds down to it, as the address would be misaligned for it)."""
    if old_width == new_width:
        return state
    if isinstance(state, st.GatherPointer):
        ty = state.offsets.type
        if old_width > new_width:
            factor = arith.ConstantOp(ty, ir.DenseElementsAttr.get_splat(
                ty, ir.IntegerAttr.get(ir.IntegerType.get_signless(64), old_width // new_width))).result
            return replace(state, offsets=arith.MulIOp(state.offsets, factor).result)
        divisor = arith.ConstantOp(ty, ir.DenseElementsAttr.get_splat(
            ty, ir.IntegerAttr.get(ir.IntegerType.get_signless(64), new_width // old_width))).result
        return replace(state, offsets=arith.FloorDivSIOp(state.offsets, divisor).result)
    if old_width > new_width:
        def scale(x):
            return im.mul(x, old_width // new_width)
    else:
        def scale(x):
            return _floor_div(x, new_width // old_width)
    return replace(state, offset=scale(state.offset), strides=tuple(scale(x) for x in state.strides))


def _floor_div(x, divisor: int):
    if isinstance(x, int):
        return x // divisor
    return arith.FloorDivSIOp(x, im.const(divisor)).result
