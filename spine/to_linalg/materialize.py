"""Concrete tensors for symbolic states, for the ops that need real values."""
from __future__ import annotations

from mlir import ir
from mlir.dialects import arith

from . import builders as b
from . import index_math as im
from .states import AffineIndex, BoolBytes, GatherPointer, MaskState, PointerState, SplatValue, WrappedPointer
from .types import is_bool


def _affine_at(offset, strides, ivs) -> ir.Value:
    acc = offset
    for stride, iv in zip(strides, ivs):
        acc = im.add(acc, im.mul(stride, iv))
    return im.as_value(acc)


def affine_tensor(state: AffineIndex) -> ir.Value:
    return b.tabulate(state.shape, state.element_type,
                      lambda ivs: im.to_integer(_affine_at(state.offset, state.strides, ivs), state.element_type))


def mask_tensor(state: MaskState) -> ir.Value:
    def at(ivs):
        result = arith.ConstantOp(ir.IntegerType.get_signless(1), 1).result
        for (lo, hi), iv in zip(state.bounds, ivs):
            above = arith.CmpIOp(arith.CmpIPredicate.sge, iv, im.as_value(lo)).result
            below = arith.CmpIOp(arith.CmpIPredicate.slt, iv, im.as_value(hi)).result
            result = arith.AndIOp(result, arith.AndIOp(above, below).result).result
        return result
    return b.tabulate(state.shape, ir.IntegerType.get_signless(1), at)


def gather_pointer(state) -> GatherPointer:
    """A structured pointer's addresses as a gather (a WrappedPointer's exact ones: its affine form's plus
    its correction)."""
    if isinstance(state, WrappedPointer):
        gather = gather_pointer(state.fast)
        return GatherPointer(gather.base, gather.element_type, gather.shape,
                             arith.AddIOp(gather.offsets, state.correction()).result)
    i64 = ir.IntegerType.get_signless(64)
    offsets = b.tabulate(state.shape, i64,
                         lambda ivs: im.to_integer(_affine_at(state.offset, state.strides, ivs), i64))
    return GatherPointer(state.base, state.element_type, state.shape, offsets)


def concrete(state) -> ir.Value:
    """The MLIR value for a state (pointers excluded: they never become plain values)."""
    if isinstance(state, ir.Value):
        return state
    if getattr(state, "exact_value", None) is not None:
        return state.exact_value()
    if isinstance(state, AffineIndex):
        if not state.shape:
            return im.to_integer(state.offset, state.element_type)
        return affine_tensor(state)
    if isinstance(state, MaskState):
        return mask_tensor(state)
    if isinstance(state, SplatValue):
        return b.splat(state.scalar, state.shape) if state.shape else state.scalar
    raise TypeError(f"no concrete value for {type(state).__name__}")


def bytes_from_bool(mask: ir.Value) -> ir.Value:
    ty = ir.RankedTensorType.get(list(ir.RankedTensorType(mask.type).shape), ir.IntegerType.get_signless(8))
    return arith.ExtUIOp(ty, mask).result


def concrete_or_bytes(conv, value: ir.Value):
    """A concrete operand for ops that move elements around (shape ops, gathers): boolean tensors as their
    i8 bytes, so no i1 tensor ends up in memory; and whether it was boolean."""
    state = conv.state(value)
    if isinstance(state, BoolBytes):
        return state.value, True
    concrete = conv.concrete(value)
    if isinstance(concrete.type, ir.RankedTensorType) and is_bool(concrete.type):
        return bytes_from_bool(concrete), True
    return concrete, False


def as_state(result: ir.Value, was_bool: bool):
    """The state of a result computed on concrete_or_bytes operands."""
    return BoolBytes(result) if was_bool else result


def widen_bool(value: ir.Value) -> ir.Value:
    """An i1 scalar or tensor as i8 (0 or 1); other values unchanged."""
    elem = value.type.element_type if isinstance(value.type, ir.RankedTensorType) else value.type
    if not (isinstance(elem, ir.IntegerType) and elem.width == 1):
        return value
    if isinstance(value.type, ir.RankedTensorType):
        return bytes_from_bool(value)
    return arith.ExtUIOp(ir.IntegerType.get_signless(8), value).result


def narrow_byte(value: ir.Value) -> ir.Value:
    """An i8 scalar holding a boolean back as i1."""
    zero = arith.ConstantOp(value.type, 0).result
    return arith.CmpIOp(arith.CmpIPredicate.ne, value, zero).result


def bool_from_bytes(data: ir.Value) -> ir.Value:
    zero = b.splat(arith.ConstantOp(ir.IntegerType.get_signless(8), 0).result,
                   ir.RankedTensorType(data.type).shape)
    return arith.CmpIOp(arith.CmpIPredicate.ne, data, zero).result
