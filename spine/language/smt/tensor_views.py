"""`smt.view` of a tensor: a sub-block, packed into micro tiles or unpacked, as reserved calls
(reference.py) that the conversion lowers to slices, linalg packs and transposes.

    base                   packed_size          result
    [R, C]                 None or (1, 1)       [S0, S1]                       slice2d
    [R, C]                 (p0, p1)             [S0/p0, S1/p1, p0, p1]         slice2d, pack
    [R1, C1, q0, q1]       None or (q0, q1)     [S0/q0, S1/q1, q0, q1]         slice4d (whole tiles)
    [R1, C1, q0, q1]       (1, 1)               [S0, S1]                       unpack, slice2d
    [R1, C1, q0, q1]       other (p0, p1)       [S0/p0, S1/p1, p0, p1]         unpack, slice2d, pack

Offsets and shapes are in elements of the unpacked matrix. Shapes must be multiples of the packing and lie
inside the base (a compile error names the line otherwise); offsets known at compile time are checked the
same way, and run-time offsets are clamped into the base so that a wrong one cannot read outside it.
A view of the whole base at offset zero is the base itself.
"""
from __future__ import annotations

from triton.language import core as tl

from . import reference
from .checks import check, constant, dims, static_ints


def view_tensor(x: tl.tensor, offsets, shape, packed_size, _semantic, _generator) -> tl.tensor:
    shape = static_ints(shape, "view shape")
    check(len(shape) == 2 and len(offsets) == 2, "smt.view takes 2-D offsets and shape (in elements)")
    packing = None if packed_size is None else static_ints(packed_size, "packed_size")
    check(packing is None or len(packing) == 2, "packed_size has two entries")
    rank = len(dims(x))
    if rank == 2:
        part = _slice(x, offsets, shape, _semantic, _generator)
        return part if packing in (None, (1, 1)) else _pack(part, packing, _generator)
    check(rank == 4, f"smt.view expects a 2-D tensor or a packed 4-D tensor, got shape {list(dims(x))}")
    tile = dims(x)[2:]
    if packing is None or packing == tile:
        return _slice_tiles(x, offsets, shape, tile, _semantic, _generator)
    part = _slice(_unpack(x, _generator), offsets, shape, _semantic, _generator)
    return part if packing == (1, 1) else _pack(part, packing, _generator)


def _offset_tensor(value, _semantic) -> tl.tensor:
    value = tl._unwrap_if_constexpr(value)
    tensor = _semantic.to_tensor(value)
    check(tensor.dtype.is_int(), f"view offsets must be integers, got {value}")
    check(not tensor.type.is_block(), "view offsets must be scalars")
    return _semantic.cast(tensor, tl.int32) if tensor.dtype != tl.int32 else tensor


def _check_inside(offsets, shape, extent) -> None:
    for o, s, n in zip(offsets, shape, extent):
        check(s <= n, f"view shape {tuple(shape)} does not fit in its base {tuple(extent)}")
        value = constant(o)
        check(value is None or 0 <= value <= n - s,
              f"view [{value}, {value}+{s}) lies outside its base's {n} elements")


def _slice(x, offsets, shape, _semantic, _generator):
    extent = dims(x)
    _check_inside(offsets, shape, extent)
    if tuple(shape) == extent:
        return x
    rows, cols = (_offset_tensor(o, _semantic) for o in offsets)
    return _generator.call_JitFunction(reference.slice2d, [x, rows, cols, tl.constexpr(shape[0]),
                                                           tl.constexpr(shape[1])], {})


def _slice_tiles(x, offsets, shape, tile, _semantic, _generator):
    extent = (dims(x)[0] * tile[0], dims(x)[1] * tile[1])
    for s, p in zip(shape, tile):
        check(s % p == 0, f"view shape {tuple(shape)} is not a multiple of the packed tile {tile}")
    for o, p in zip(offsets, tile):
        value = constant(o)
        check(value is None or value % p == 0, f"view offset {value} is not a multiple of the packed tile {tile}")
    _check_inside(offsets, shape, extent)
    if tuple(shape) == extent:
        return x
    rows, cols = (_semantic.floordiv(_offset_tensor(o, _semantic), p) for o, p in zip(offsets, tile))
    return _generator.call_JitFunction(reference.slice4d, [x, rows, cols, tl.constexpr(shape[0] // tile[0]),
                                                           tl.constexpr(shape[1] // tile[1])], {})


def _pack(x, packing, _generator):
    rows, cols = dims(x)
    check(rows % packing[0] == 0 and cols % packing[1] == 0,
          f"view shape {(rows, cols)} is not a multiple of packed_size {packing}")
    return _generator.call_JitFunction(reference.pack, [x, tl.constexpr(packing[0]), tl.constexpr(packing[1])], {})


def _unpack(x, _generator):
    return _generator.call_JitFunction(reference.unpack, [x], {})
