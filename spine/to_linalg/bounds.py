"""Bounds checks for loads, stores and atomics: kernels compiled with debug=True (or TRITON_DEBUG=1).

Each pointer argument's extent arrives as one more runtime argument: the number of elements from the
tensor's data pointer to the end of the bytes its view may touch (driver/arguments.py `element_extent`),
appended by the launcher after the kernel's own arguments, one i64 per pointer argument, in order:

    func.func @k(%x: memref<?xf32>, %n: i32, %x_extent: i64, %pid_x: i32, ...)

Every element a mask enables must lie in [0, extent) of the argument its pointer came from:

    structured tiles     one test per access, of the lowest and highest offset of the masked window
    element loops        one test per enabled element (gathers, scatters, atomics, scalar accesses)

The test comes before the access. A failing structured access gets an empty window (a load then yields
its `other` values), a failing element is neither read nor written, and the runtime's spine_bounds_fail
(cpp/device_io.c) records the first failure, which the launcher raises as spine.errors.OutOfBoundsError
once the grid finished. Without debug, the helpers here emit nothing.

The extent is one contiguous range: elements in the gaps of a strided view (the columns between the
rows of `t[:, :8]`) count as inside, and so does memory another argument shares.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

from mlir import ir
from mlir.dialects import arith, scf

from ..errors import OutOfBoundsError
from . import builders as b
from . import index_math as im
from ..errors import describe_location
from .memory import Window

EXTENT_KIND = "i64"
FAIL_FUNCTION = "spine_bounds_fail"


@dataclass
class BoundsCheck:
    """What the checks need to know about the kernel's pointer arguments, by argument index."""
    extents: dict = field(default_factory=dict)   # extent in elements (an index value)
    names: dict = field(default_factory=dict)     # the argument's name in the kernel's source


def extent_kinds(kinds) -> list[str]:
    """The runtime-argument kinds of the extents that follow the kernel's own arguments."""
    return [EXTENT_KIND for kind in kinds if kind == "ptr"]


def extent_types(kinds) -> list[ir.Type]:
    return [ir.IntegerType.get_signless(64) for _ in extent_kinds(kinds)]


def bind_extents(conv, kinds, names, extent_arguments) -> None:
    """Record each pointer argument's extent (converted to index once, at function entry) and name."""
    pointer_args = [i for i, kind in enumerate(kinds) if kind == "ptr"]
    for index, argument in zip(pointer_args, extent_arguments):
        conv.bounds.extents[index] = im.from_integer(argument)
        conv.bounds.names[index] = names[index]


# -------------------------------------------------------------------------------------------- structured

def guard_window(conv, op, ptr, window: Optional[Window], access: str) -> Optional[Window]:
    """The window of a structured tile access that may proceed: `window` itself when every element in it
    lies inside the argument, an empty one (after reporting) when any does not."""
    if conv.bounds is None or ptr.base not in conv.argument_of:   # smt scratch buffers are not arguments
        return window
    if window is None:
        window = Window(tuple(0 for _ in ptr.shape), tuple(ptr.shape))
    if any(isinstance(size, int) and size == 0 for size in window.sizes):
        return window
    lowest, highest = _offset_range(ptr, window)
    extent = _extent(conv, ptr.base)
    below = _less(lowest, 0)
    above = arith.CmpIOp(arith.CmpIPredicate.sge, im.as_value(highest), extent).result
    outside = arith.OrIOp(below, above).result
    not_empty = _not_empty(window)
    if not_empty is not None:
        outside = arith.AndIOp(outside, not_empty).result
    offending = im.select(below, lowest, highest)
    _report_if(conv, op, ptr.base, outside, offending, access)
    return Window(window.starts, tuple(im.select(outside, 0, size) for size in window.sizes))


def _offset_range(ptr, window: Window):
    """Lowest and highest element offset in a non-empty window (strides may be negative)."""
    lowest = highest = ptr.offset
    for start, size, stride in zip(window.starts, window.sizes, ptr.strides):
        first = im.mul(start, stride)
        span = im.mul(im.sub(size, 1), stride)
        lowest = im.add(lowest, im.add(first, im.minimum(span, 0)))
        highest = im.add(highest, im.add(first, im.maximum(span, 0)))
    return lowest, highest


def _not_empty(window: Window) -> Optional[ir.Value]:
    """An i1 that is true when every dynamic size is positive (None when all sizes are static)."""
    result = None
    for size in window.sizes:
        if not isinstance(size, int):
            positive = arith.CmpIOp(arith.CmpIPredicate.sgt, size, im.const(0)).result
            result = positive if result is None else arith.AndIOp(result, positive).result
    return result


def _less(a, b) -> ir.Value:
    return arith.CmpIOp(arith.CmpIPredicate.slt, im.as_value(a), im.as_value(b)).result


# -------------------------------------------------------------------------------------------- elements

def guard_element(conv, op, base: ir.Value, offset, access: str, body: Callable[[], None]) -> None:
    """body() (which accesses the element at `offset` of `base`) only when that element is inside."""
    if conv.bounds is None or base not in conv.argument_of:
        body()
        return
    branch = scf.IfOp(_inside(conv, base, offset), has_else=True)
    with ir.InsertionPoint(branch.then_block):
        body()
        scf.YieldOp([])
    with ir.InsertionPoint(branch.else_block):
        _report(conv, op, base, offset, access)
        scf.YieldOp([])


def guard_value(conv, op, base: ir.Value, offset, access: str, element_type: ir.Type,
                produce: Callable[[], ir.Value]) -> ir.Value:
    """produce() when the element at `offset` is inside, else zero (after reporting)."""
    if conv.bounds is None or base not in conv.argument_of:
        return produce()
    branch = scf.IfOp(_inside(conv, base, offset), [element_type], has_else=True)
    with ir.InsertionPoint(branch.then_block):
        scf.YieldOp([produce()])
    with ir.InsertionPoint(branch.else_block):
        _report(conv, op, base, offset, access)
        scf.YieldOp([b.zero(element_type)])
    return branch.results[0]


def _inside(conv, base: ir.Value, offset) -> ir.Value:
    # Unsigned: a negative offset compares above any extent.
    return arith.CmpIOp(arith.CmpIPredicate.ult, im.as_value(offset), _extent(conv, base)).result


# ------------------------------------------------------------------------------------------- reporting

def _extent(conv, base: ir.Value) -> ir.Value:
    index = conv.argument_of[base]
    extent = conv.bounds.extents[index]
    # a view of the argument as elements of another width (a pointer cast): its extent in those elements
    bits, view_bits = (_element_bits(v) for v in (conv.entry_block.arguments[index], base))
    if bits == view_bits:
        return extent
    return im.as_value(_floor_div(im.mul(extent, bits), view_bits))


def _element_bits(memref: ir.Value) -> int:
    return getattr(ir.MemRefType(memref.type).element_type, "width", 8)


def _floor_div(x, divisor: int):
    return arith.FloorDivSIOp(im.as_value(x), im.const(divisor)).result


def _report_if(conv, op, base: ir.Value, condition: ir.Value, offset, access: str) -> None:
    branch = scf.IfOp(condition)
    with ir.InsertionPoint(branch.then_block):
        _report(conv, op, base, offset, access)
        scf.YieldOp([])


def _report(conv, op, base: ir.Value, offset, access: str) -> None:
    """Call the runtime with what the error message needs; the text fixed at compile time names the
    access, the argument, the kernel and the source line."""
    from .debug_ops import string_address
    index = conv.argument_of[base]
    text = (f"{OutOfBoundsError.MARKER}{access} '{conv.bounds.names[index]}' in kernel '{conv.kernel_name}' "
            f"at {describe_location(op.location)}")
    conv.call(FAIL_FUNCTION,
              [string_address(conv, text), *conv.program_ids[:3], _as_i64(offset), _as_i64(_extent(conv, base))])


def _as_i64(value) -> ir.Value:
    return im.to_integer(value, ir.IntegerType.get_signless(64))
