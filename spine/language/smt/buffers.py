"""Scratch buffers (`smt.alloc`, `smt.alloc_copies`), block-pointer views of them (`smt.view` of a pointer)
and `smt.descriptor_load`.

A scratch buffer is row-major memory private to one program instance: its TTIR is a reserved
`scratch` call (reference.py) that yields the buffer's base pointer, and every view is an ordinary
`tt.make_tensor_ptr` over that base, so `tl.load` and `tl.store` (with `boundary_check`) work on views
exactly as on kernel arguments. A view never moves data:

    unpacked view  rows [r, r + R) and columns [c, c + C) of the buffer: a 2-D block pointer
    packed view    the same elements seen as micro tiles [R/p0, C/p1, p0, p1]: a 4-D block pointer with
                   strides (p0 * cols, p1, cols, 1) over the same row-major memory, so storing a packed
                   tensor through it unpacks it and loading packs it again

Each view is a `tile_pointer`: a block pointer that also remembers the buffer's geometry, which is what
lets `smt.view` view it again. A block pointer made by `tl.make_block_ptr` carries no such record; view the
tensor `smt.descriptor_load` returns instead.

The element type of `alloc(shape)` without `type=` is that of the first pointer argument of the function
calling it: scratch buffers usually stage that data (spine-triton defaults to fp32, so a kernel staging fp16
tiles there must pass `type=`; here it need not, and a kernel relying on the fp32 default with fp16
arguments must pass `type=tl.float32`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

from triton.language import core as tl

from . import reference
from .checks import check, constant, static_ints


@dataclass(frozen=True)
class Buffer:
    base: tl.tensor          # scalar pointer to the buffer's first element
    rows: int
    cols: int


@dataclass(frozen=True)
class TileView:
    """What a tile_pointer points at: rows and columns [origin, origin + shape) of a buffer, in elements."""
    buffer: Buffer
    origin: tuple                          # ints or int32 scalar tensors
    shape: Tuple[int, int]
    packing: Optional[Tuple[int, int]]     # micro tile size of a packed view


class tile_pointer_type(tl.pointer_type):
    """The type of a tile_pointer: a block pointer type that carries the view. The frontend copies values
    by rebuilding them from their type (entering a loop or a branch), so the view must live here."""

    def __init__(self, element_ty, view: TileView):
        super().__init__(element_ty)
        self.view = view

    def _unflatten_ir(self, handles, cursor):
        return tile_pointer(handles[cursor], self), cursor + 1


class tile_pointer(tl.tensor):
    """A block pointer to a view of a 2-D scratch buffer."""

    @property
    def view(self) -> TileView:
        return self.type.view


class scratch_copies_type(tl.pointer_type):
    """`alloc_copies`: `copies` buffers of one shape back to back, as the pointer to the first."""

    def __init__(self, element_ty, shape: Tuple[int, ...], copies: int):
        super().__init__(element_ty)
        self.copy_shape = shape
        self.copies = copies

    def _unflatten_ir(self, handles, cursor):
        return scratch_copies(handles[cursor], self), cursor + 1


class scratch_copies(tl.tensor):
    """`buf[i]` is a block pointer to the i-th buffer."""

    def __getitem__(self, index, _semantic=None):
        shape = self.type.copy_shape
        base = _semantic.add(tl.tensor(self.handle, tl.pointer_type(self.type.element_ty)),
                             _semantic.mul(_semantic.to_tensor(index), _numel(shape), True), True)
        return whole_buffer(base, shape, _semantic)


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def default_element_type(generator):
    """The element type of the calling function's first pointer argument, fp32 if it has none."""
    for ty in getattr(getattr(generator, "prototype", None), "arg_types", []) or []:
        if isinstance(ty, tl.pointer_type) and not ty.element_ty.is_block():
            return ty.element_ty
    return tl.float32


def allocate(shape, dtype, scope, copies, _semantic, _generator) -> tl.tensor:
    """The base pointer of a fresh buffer of `copies` x shape elements."""
    shape = static_ints(shape, "alloc shape")
    check(all(s > 0 for s in shape), f"alloc shape {shape} must be positive")
    dtype = tl._unwrap_if_constexpr(dtype) or default_element_type(_generator)
    check(isinstance(dtype, tl.dtype) and not dtype.is_ptr(), f"alloc type must be a data type, got {dtype}")
    numel = _numel(shape) * copies
    base = _generator.call_JitFunction(reference.scratch, [tl.constexpr(numel),
                                                           tl.constexpr(tl.pointer_type(dtype))], {})
    base.handle.set_attr("smt.numel", _semantic.builder.get_int32_attr(numel))
    base.handle.set_attr("smt.scope", _semantic.builder.get_string_attr(str(tl._unwrap_if_constexpr(scope))))
    return base


def whole_buffer(base: tl.tensor, shape, _semantic) -> tl.tensor:
    """A block pointer to all of a row-major buffer (a tile_pointer when the buffer is 2-D)."""
    shape = tuple(shape)
    if len(shape) == 2:
        return pointer_view(Buffer(base, shape[0], shape[1]), (0, 0), shape, None, _semantic)
    strides = [_numel(shape[d + 1:]) for d in range(len(shape))]
    return _semantic.make_block_ptr(base, list(shape), strides, [0] * len(shape), list(shape),
                                    list(reversed(range(len(shape)))))


def pointer_view(buffer: Buffer, origin, shape, packing, _semantic) -> tile_pointer:
    rows, cols = buffer.rows, buffer.cols
    if packing is None:
        ptr = _semantic.make_block_ptr(buffer.base, [rows, cols], [cols, 1], list(origin), list(shape), [1, 0])
    else:
        p0, p1 = packing
        check(rows % p0 == 0 and cols % p1 == 0,
              f"a buffer of {rows} x {cols} cannot be seen as {p0} x {p1} micro tiles")
        tiles = [_divide(origin[0], p0, _semantic), _divide(origin[1], p1, _semantic), 0, 0]
        ptr = _semantic.make_block_ptr(buffer.base, [rows // p0, cols // p1, p0, p1], [p0 * cols, p1, cols, 1],
                                       tiles, [shape[0] // p0, shape[1] // p1, p0, p1], [3, 2, 1, 0])
    view = TileView(buffer, tuple(origin), tuple(shape), packing)
    return tile_pointer(ptr.handle, tile_pointer_type(ptr.type.element_ty, view))


def view_pointer(base, offsets, shape, packed_size, _semantic) -> tile_pointer:
    """smt.view of a tile_pointer: offsets are relative to the view, in elements."""
    check(isinstance(base, tile_pointer),
          "smt.view of a block pointer is supported for smt.alloc buffers and their views; for a block pointer "
          "made by tl.make_block_ptr, view the tensor smt.descriptor_load returns")
    shape = static_ints(shape, "view shape")
    check(len(shape) == 2 and len(offsets) == 2, "smt.view of a buffer takes 2-D offsets and shape (in elements)")
    packing = base.view.packing if packed_size is None else \
        (None if tuple(packed_size) == (1, 1) else tuple(packed_size))
    if packing is not None:
        check(shape[0] % packing[0] == 0 and shape[1] % packing[1] == 0,
              f"view shape {shape} is not a multiple of packed_size {packing}")
        for o, p in zip(offsets, packing):
            value = constant(o)
            check(value is None or value % p == 0, f"view offset {value} is not a multiple of packed_size {packing}")
    buffer = base.view.buffer
    origin = tuple(_add(a, o, _semantic) for a, o in zip(base.view.origin, offsets))
    for o, s, n in zip(origin, shape, (buffer.rows, buffer.cols)):
        value = constant(o)
        check(value is None or (0 <= value and value + s <= n),
              f"view [{value}, {value}+{s}) lies outside the buffer's {n} elements")
    return pointer_view(buffer, origin, shape, packing, _semantic)


def _add(a, b, _semantic):
    a, b = tl._unwrap_if_constexpr(a), tl._unwrap_if_constexpr(b)
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    return _semantic.add(_semantic.to_tensor(a), _semantic.to_tensor(b), True)


def _divide(a, p: int, _semantic):
    a = tl._unwrap_if_constexpr(a)
    if isinstance(a, int):
        return a // p
    return _semantic.floordiv(a, p)


def descriptor_load(base, offsets, _semantic) -> tl.tensor:
    """The block `base` points at, moved by `offsets`; elements outside the tensor read as zero."""
    check(isinstance(base, tl.tensor) and base.type.is_ptr() and base.type.element_ty.is_block(),
          "smt.descriptor_load expects a block pointer (tl.make_block_ptr or an smt.alloc view)")
    rank = len(base.type.element_ty.shape)
    offsets = list(offsets)
    packing = base.view.packing if isinstance(base, tile_pointer) else None
    if packing is not None and len(offsets) == 2:
        offsets = [_divide(offsets[0], packing[0], _semantic), _divide(offsets[1], packing[1], _semantic), 0, 0]
    check(len(offsets) == rank, f"smt.descriptor_load of a {rank}-D block pointer takes {rank} offsets")
    if any(constant(o) != 0 for o in offsets):
        base = _semantic.advance(base, offsets)
    return _semantic.load(base, None, None, tuple(range(rank)), "zero", "", "", False)
