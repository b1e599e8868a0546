"""Shared pieces of tt.load and tt.store: operand decoding and the masked-window arithmetic."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from mlir import ir
from mlir.dialects import arith, memref

from . import builders as b
from . import index_math as im
from . import states as st


def segment_sizes(op) -> list[int]:
    try:
        return list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))
    except KeyError:
        return [1] * len(op.operands)


def split_operands(op, names: tuple[str, ...]) -> dict:
    """Operands by segment name, None where a segment is empty."""
    out, at = {}, 0
    sizes = segment_sizes(op)
    sizes += [0] * (len(names) - len(sizes))
    for name, size in zip(names, sizes):
        out[name] = op.operands[at] if size else None
        at += size
    return out


@dataclass(frozen=True)
class Window:
    """The part of a tile a structured mask selects: starts and sizes per dim (Index values)."""
    starts: tuple
    sizes: tuple

    @staticmethod
    def of(mask: Optional[st.MaskState], shape) -> Optional["Window"]:
        if mask is None:
            return None
        bounds = st.clamped_bounds(mask)
        return Window(tuple(s for s, _ in bounds), tuple(n for _, n in bounds))


def pointer_view(ptr: st.PointerState, window: Optional[Window] = None) -> ir.Value:
    """A strided view of the tile, or of just its masked window. The window's start is folded into the
    view's offset: the tile's own first element may lie before the argument's start (`ptr - 1` with
    the first lane masked off), which a memref view may not."""
    if window is None:
        return b.strided_view(ptr.base, ptr.element_type, ptr.shape, ptr.offset, ptr.strides)
    offset = ptr.offset
    for start, stride in zip(window.starts, ptr.strides):
        offset = im.add(offset, im.mul(start, stride))
    return b.strided_view(ptr.base, ptr.element_type, window.sizes, offset, ptr.strides)


def tile_buffer(shape, elem) -> ir.Value:
    return memref.AllocOp(ir.MemRefType.get(list(shape), elem), [], []).result


def spans(start, size, n: int) -> bool:
    """Whether a window's start and size along a dimension of n are known to cover all of it."""
    return isinstance(start, int) and isinstance(size, int) and start == 0 and size == n


def is_partial(window: Window, shape):
    """An i1 that is true when the window leaves out part of the tile (a constant false when it never
    does)."""
    partial = None
    for start, size, n in zip(window.starts, window.sizes, shape):
        if spans(start, size, n):
            continue
        if isinstance(start, int) and isinstance(size, int):
            return arith.ConstantOp(ir.IntegerType.get_signless(1), 1).result
        short = arith.CmpIOp(arith.CmpIPredicate.ne, im.as_value(size), im.const(n)).result
        partial = short if partial is None else arith.OrIOp(partial, short).result
    return partial if partial is not None else arith.ConstantOp(ir.IntegerType.get_signless(1), 0).result


def transpose_lanes(conv) -> int:
    """How wide a block the target transposes in registers (0: it copies element by element)."""
    return conv.microkernel.transpose_lanes if conv.microkernel is not None else 0


def may_view_whole_tile(ptr: st.PointerState) -> bool:
    """False when the tile provably starts before its argument: only masked windows of it are valid."""
    return not (isinstance(ptr.offset, int) and ptr.offset < 0)


def mask_bytes(mask: ir.Value) -> ir.Value:
    """A mask tensor widened to i8 for element-by-element loops: the loops read it from memory, and MLIR
    cannot lower i1 buffers."""
    from .materialize import bytes_from_bool
    return bytes_from_bool(mask)


def mask_bit(mask_bytes_tensor: ir.Value, ivs) -> ir.Value:
    from mlir.dialects import tensor
    byte = tensor.ExtractOp(mask_bytes_tensor, ivs).result
    return arith.CmpIOp(arith.CmpIPredicate.ne, byte, arith.ConstantOp(byte.type, 0).result).result


def each_unmasked_element(shape, mask, body) -> None:
    """Loop over every index of `shape`, calling body(ivs) where the (i8) mask is set, or everywhere."""
    from mlir.dialects import scf

    from .builders import loop_nest

    def visit(ivs):
        if mask is None:
            body(ivs)
            return
        branch = scf.IfOp(mask_bit(mask, ivs))
        with ir.InsertionPoint(branch.then_block):
            body(ivs)
            scf.YieldOp([])
    loop_nest(shape, visit)
