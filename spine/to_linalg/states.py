"""What the conversion knows about a TTIR value beyond its MLIR value.

Triton kernels build addresses and masks elementwise (`base + pid * BLOCK + tl.arange(0, BLOCK)`,
`offs < n`). Materialised literally that would be a gather; recognised, it is a strided block copy. These
immutable states record the recognised structure:

    AffineIndex   value[i] = offset + sum_d strides[d] * i[d]        integer tensors from make_range/splat
    PointerState  address[i] = base + offset + sum_d strides[d]*i[d] structured pointer tensors (or scalars)
    GatherPointer address[i] = base + offsets[i]                     any other pointer tensor
    BlockPointer  a block at per-dim offsets in a (shape, strides) view tl.make_block_ptr
    MaskState     mask[i] = and_d (lo[d] <= i[d] < hi[d])            masks from comparisons of AffineIndex
    SplatValue    value[i] = scalar                                  non-integer splats (e.g. `other=0.0`)
    BoolBytes     a computed boolean tensor, kept as i8 (each use compares it to 0)
    IntegerAddress  tensors of pointers made from integers (tt.int_to_ptr): the i64 addresses, never
                  dereferenced (a scalar one is a PointerState into memory at that address)
    WrappedIndex  an AffineIndex wherever a run-time condition holds: `(pid * B + arange(B)) % M`, which
                  wraps around only where the tile runs past M
    WrappedPointer  a PointerState wherever such a condition holds, a gather's addresses everywhere:
                  loads and stores branch on the condition (`a_ptr + (offs % M)[:, None] * stride`)

The combinators are pure: they return a new state, or None when the structure is lost, in which case the
converter materialises concrete tensors (materialize.py) and falls back to the general path.

Index arithmetic on these states runs in `index` (64 bits) and assumes it does not overflow the TTIR
integer type: an index that wraps would address outside its tensor. A value used as data must wrap as
Triton's integers do, so arith.py gives the AffineIndex and MaskState results of arithmetic an
`exact_value`: a recipe that recomputes the value with the TTIR op itself, used whenever the state is
materialised. Uniform (splat) values are computed in their own type from the start.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Optional, Tuple

from mlir import ir

from . import index_math as im
from .index_math import Index


@dataclass(frozen=True)
class AffineIndex:
    shape: Tuple[int, ...]
    offset: Index
    strides: Tuple[Index, ...]
    element_type: ir.Type            # the integer type of the TTIR value
    # recomputes the TTIR value (wrapping like it) where index arithmetic might not; see above
    exact_value: Optional[Callable[[], ir.Value]] = field(default=None, compare=False)

    @property
    def is_uniform(self) -> bool:
        return all(im.same(s, 0) for s in self.strides)


@dataclass(frozen=True)
class PointerState:
    base: ir.Value                   # memref<?xT> of the kernel argument
    element_type: ir.Type            # T
    shape: Tuple[int, ...]           # () for a scalar pointer
    offset: Index                    # in elements
    strides: Tuple[Index, ...]
    # a pointer made from an integer (tt.int_to_ptr): the i64 address `base` starts at; None for the
    # kernel's arguments and buffers
    address: Optional[ir.Value] = None


@dataclass(frozen=True)
class BlockPointer:
    """tl.make_block_ptr: a block of `block_shape` at `offsets` inside a (shape, strides) tensor view."""
    base: ir.Value
    element_type: ir.Type
    block_shape: Tuple[int, ...]
    shape: Tuple[Index, ...]
    strides: Tuple[Index, ...]
    offsets: Tuple[Index, ...]
    base_offset: Index = 0           # elements the base pointer was already advanced by


@dataclass(frozen=True)
class GatherPointer:
    base: ir.Value
    element_type: ir.Type
    shape: Tuple[int, ...]
    offsets: ir.Value                # tensor<shape x i64>, in elements


@dataclass(frozen=True)
class MaskState:
    shape: Tuple[int, ...]
    bounds: Tuple[Tuple[Index, Index], ...]   # per dim, [lo, hi) before clamping to [0, size)
    exact_value: Optional[Callable[[], ir.Value]] = field(default=None, compare=False)


@dataclass(frozen=True)
class SplatValue:
    shape: Tuple[int, ...]
    scalar: ir.Value


@dataclass(frozen=True)
class IntegerAddress:
    """Pointers made from integers (`x.to(tl.pi32_t)`), only selected and turned back into integers: the
    conversion cannot tell which argument such an address points into, so it cannot be dereferenced."""
    value: ir.Value                  # i64 scalar or tensor


@dataclass(frozen=True)
class BoolBytes:
    """A computed boolean tensor, held as i8. MLIR's LLVM lowering cannot keep i1 tensors in memory,
    and a boolean used twice would be (elementwise fusion leaves multi-use producers alone); an i8 tensor
    can be, and each use gets its own single-use `!= 0`, which fuses into that use."""
    value: ir.Value


@dataclass(frozen=True)
class WrappedIndex:
    """An integer tensor that is `fast` wherever `holds` (an i1 scalar) is true: a remainder of an affine
    index by a uniform modulus where no element wraps around (Triton's matmul tutorial keeps its tiles in
    bounds with `offs_am = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M`: only a tile that runs past M
    wraps). `exact_value` gives the TTIR value itself, wrapped or not."""
    fast: AffineIndex
    holds: ir.Value
    exact_value: Optional[Callable[[], ir.Value]] = field(default=None, compare=False)

    @property
    def shape(self) -> Tuple[int, ...]:
        return self.fast.shape


@dataclass(frozen=True)
class WrappedPointer:
    """A pointer tensor that is `fast` wherever `holds` is true; everywhere, its addresses are fast's plus
    correction() (i64 elements, fast's shape: where a remainder wrapped, how far back it went). Loads and
    stores take fast's structured path when `holds`, a gather otherwise; adding a uniform or affine offset
    moves fast and keeps the correction, so a K loop's `ptrs += BLOCK_K * stride` carries it."""
    fast: PointerState
    holds: ir.Value
    correction: Callable[[], ir.Value] = field(compare=False)

    @property
    def shape(self) -> Tuple[int, ...]:
        return self.fast.shape


State = object  # one of the dataclasses above, or a plain ir.Value for a concrete value


# ----------------------------------------------------------------------------------------------- shape ops

def expand_dims(state, axis: int):
    """(Recipes of exact values do not follow; tensor_ops.py reshapes them.)"""
    if isinstance(state, WrappedIndex):
        return WrappedIndex(expand_dims(state.fast, axis), state.holds)
    if isinstance(state, AffineIndex):
        return replace(state, shape=_insert(state.shape, axis, 1), strides=_insert(state.strides, axis, 0),
                       exact_value=None)
    if isinstance(state, PointerState):
        return replace(state, shape=_insert(state.shape, axis, 1), strides=_insert(state.strides, axis, 0))
    if isinstance(state, MaskState):
        return replace(state, shape=_insert(state.shape, axis, 1), bounds=_insert(state.bounds, axis, (0, 1)),
                       exact_value=None)
    if isinstance(state, SplatValue):
        return replace(state, shape=_insert(state.shape, axis, 1))
    return None


def broadcast(state, shape: Tuple[int, ...]):
    """Broadcast size-1 dims to `shape`; a size-1 dim's stride no longer matters and becomes 0."""
    if isinstance(state, WrappedIndex):
        return WrappedIndex(broadcast(state.fast, shape), state.holds)
    if isinstance(state, PointerState):
        strides = tuple(s if old == new else 0 for s, old, new in zip(state.strides, state.shape, shape))
        return replace(state, shape=tuple(shape), strides=strides)
    if isinstance(state, AffineIndex):
        strides = tuple(s if old == new else 0 for s, old, new in zip(state.strides, state.shape, shape))
        return replace(state, shape=tuple(shape), strides=strides, exact_value=None)
    if isinstance(state, MaskState):
        bounds = []
        for (lo, hi), old, new in zip(state.bounds, state.shape, shape):
            if old == new:
                bounds.append((lo, hi))
            else:
                # One element decides the whole broadcast dim: all of it, or none of it.
                inside = _inside_zero(lo, hi)
                bounds.append((0, new) if inside is True else (0, 0) if inside is False
                              else (0, im.select(inside, new, 0)))
        return MaskState(tuple(shape), tuple(bounds))
    if isinstance(state, SplatValue):
        return replace(state, shape=tuple(shape))
    return None


def _inside_zero(lo: Index, hi: Index):
    """Whether index 0 lies in [lo, hi): a bool when known, else an i1 value."""
    from mlir.dialects import arith
    if isinstance(lo, int) and isinstance(hi, int):
        return lo <= 0 < hi
    a = arith.CmpIOp(arith.CmpIPredicate.sle, im.as_value(lo), im.const(0)).result
    b = arith.CmpIOp(arith.CmpIPredicate.sgt, im.as_value(hi), im.const(0)).result
    return arith.AndIOp(a, b).result


def _insert(items: tuple, axis: int, value) -> tuple:
    return items[:axis] + (value,) + items[axis:]


# ---------------------------------------------------------------------------------------------- arithmetic

def add_index(a: AffineIndex, b: AffineIndex) -> AffineIndex:
    return replace(a, offset=im.add(a.offset, b.offset),
                   strides=tuple(im.add(x, y) for x, y in zip(a.strides, b.strides)), exact_value=None)


def sub_index(a: AffineIndex, b: AffineIndex) -> AffineIndex:
    return replace(a, offset=im.sub(a.offset, b.offset),
                   strides=tuple(im.sub(x, y) for x, y in zip(a.strides, b.strides)), exact_value=None)


def mul_index(a: AffineIndex, b: AffineIndex) -> Optional[AffineIndex]:
    """Affine times uniform stays affine; affine times affine does not."""
    if not b.is_uniform:
        a, b = b, a
    if not b.is_uniform:
        return None
    k = b.offset
    return replace(a, offset=im.mul(a.offset, k), strides=tuple(im.mul(s, k) for s in a.strides),
                   exact_value=None)


def same_layout(a, b) -> bool:
    """Whether two pointer states address elements of one type in one shape with the same strides,
    whatever memory each points into."""
    return (isinstance(a, PointerState) and isinstance(b, PointerState) and a.element_type == b.element_type
            and a.shape == b.shape and all(im.same(x, y) for x, y in zip(a.strides, b.strides)))


def offset_pointer(ptr: PointerState, index: AffineIndex) -> PointerState:
    """tt.addptr of a structured pointer and an affine index (shapes already agree)."""
    strides = ptr.strides if not ptr.shape else tuple(im.add(x, y) for x, y in zip(ptr.strides, index.strides))
    if not ptr.shape and index.shape:
        return None
    return replace(ptr, offset=im.add(ptr.offset, index.offset), strides=strides)


def compare_to_mask(predicate: str, lhs: AffineIndex, rhs: AffineIndex) -> Optional[MaskState]:
    """Turn `lhs <pred> rhs` into per-dim bounds when one side varies along at most one dim with a
    positive constant stride and the other side is uniform."""
    flipped = {"slt": "sgt", "sle": "sge", "sgt": "slt", "sge": "sle", "ult": "ugt", "ule": "uge",
               "ugt": "ult", "uge": "ule"}
    if lhs.is_uniform and not rhs.is_uniform:
        lhs, rhs, predicate = rhs, lhs, flipped.get(predicate)
    if predicate is None or not rhs.is_uniform:
        return None
    if predicate.startswith("u"):
        # Unsigned compares of a non-negative range against a bound: only `<`/`<=` keep their meaning.
        if predicate not in ("ult", "ule"):
            return None
        predicate = "s" + predicate[1:]
    varying = [d for d, s in enumerate(lhs.strides) if not im.same(s, 0)]
    shape = lhs.shape
    full = tuple((0, n) for n in shape)
    if not varying:
        return _uniform_compare(predicate, lhs, rhs, shape)
    if len(varying) != 1 or not isinstance(lhs.strides[varying[0]], int) or lhs.strides[varying[0]] <= 0:
        return None
    d = varying[0]
    stride = lhs.strides[d]
    # lhs = off + stride * i  <pred>  n
    limit = im.sub(rhs.offset, lhs.offset)
    if predicate == "slt":
        bound = (0, im.ceil_div(limit, stride))
    elif predicate == "sle":
        bound = (0, im.ceil_div(im.add(limit, 1), stride))
    elif predicate == "sge":
        bound = (im.ceil_div(limit, stride), shape[d])
    elif predicate == "sgt":
        bound = (im.ceil_div(im.add(limit, 1), stride), shape[d])
    else:
        return None
    return MaskState(shape, full[:d] + (bound,) + full[d + 1:])


def _uniform_compare(predicate, lhs, rhs, shape) -> Optional[MaskState]:
    from mlir.dialects import arith
    if not shape:
        return None
    ops = {"slt": arith.CmpIPredicate.slt, "sle": arith.CmpIPredicate.sle, "sgt": arith.CmpIPredicate.sgt,
           "sge": arith.CmpIPredicate.sge, "eq": arith.CmpIPredicate.eq, "ne": arith.CmpIPredicate.ne}
    if predicate not in ops:
        return None
    cond = arith.CmpIOp(ops[predicate], im.as_value(lhs.offset), im.as_value(rhs.offset)).result
    return uniform_mask(cond, shape)


def uniform_mask(cond: ir.Value, shape) -> MaskState:
    """A mask that is all true or all false, from an i1 scalar."""
    bounds = tuple((0, n) for n in shape)
    return MaskState(tuple(shape), ((0, im.select(cond, shape[0], 0)),) + bounds[1:])


def and_masks(a: MaskState, b: MaskState) -> MaskState:
    bounds = tuple((im.maximum(la, lb), im.minimum(ha, hb)) for (la, ha), (lb, hb) in zip(a.bounds, b.bounds))
    return MaskState(a.shape, bounds)


def clamped_bounds(mask: MaskState) -> Tuple[Tuple[Index, Index], ...]:
    """Bounds as (start, size) pairs inside the tile: 0 <= start, start + size <= dim size."""
    out = []
    for (lo, hi), n in zip(mask.bounds, mask.shape):
        start = im.clamp(lo, 0, n)
        end = im.clamp(hi, start, n)
        out.append((start, im.sub(end, start)))
    return tuple(out)
