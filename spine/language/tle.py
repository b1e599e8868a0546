"""tle: FlagTree's tile language extension as spine-triton offers it (`triton.language.extra.tle`).

    load(pointer, ..., is_async=False)    tl.load; `is_async` is accepted (a CPU load completes before
                                          the next operation anyway)
    extract_tile(x, index, tile_shape)    the tile of `x` at `index` of the grid of `tile_shape` tiles
                                          that cover x
    insert_tile(x, tile, index)           x with that tile replaced by `tile`

`index` is a tile coordinate per dimension (constants or run-time scalars), or the tile's row-major
number over the grid (a constant or a run-time scalar). Constant indices are checked against the grid;
run-time ones must lie in it (they are not checked). spine-triton's own `tle.load` raises
NotImplementedError; this one loads.

Written in ordinary Triton: x is reshaped and permuted into [tiles, tile elements], and the tile is read
with `tl.gather` of its row (or written with `tl.where` on its row), so the results are exact for every
element type and Spine needs no lowering of its own.
"""
from __future__ import annotations

import math

from triton.language import core as tl

from .smt.checks import check, constant

__all__ = ["load", "extract_tile", "insert_tile"]


@tl.builtin
def load(pointer, mask=None, other=None, boundary_check=(), padding_option="", cache_modifier="",
         eviction_policy="", volatile=False, is_async=False, _semantic=None):
    """`tl.load` with FlagTree's extra `is_async` flag."""
    return tl.load(pointer, mask, other, boundary_check, padding_option, cache_modifier, eviction_policy,
                   volatile, _semantic=_semantic)


def _static_shape(shape, what: str) -> list:
    dims = [constant(d) for d in tl._unwrap_if_constexpr(shape)] if isinstance(
        tl._unwrap_if_constexpr(shape), (list, tuple, tl.tuple)) else [constant(shape)]
    check(all(d is not None and d > 0 for d in dims), f"{what} must be positive constants, got {shape}")
    return dims


def _grid(source: list, tile: list) -> list:
    check(len(tile) == len(source), f"tile shape {tile} must have the rank of the source {source}")
    for i, (s, t) in enumerate(zip(source, tile)):
        check(s % t == 0, f"source dimension {i} ({s}) is not a multiple of the tile's ({t})")
    return [s // t for s, t in zip(source, tile)]


def _tile_number(index, grid: list, _semantic):
    """The tile's row-major number over `grid`: a Python int for a constant index, else an int32 scalar."""
    index = tl._unwrap_if_constexpr(index)
    count = math.prod(grid)
    if not isinstance(index, (list, tuple, tl.tuple)):
        number = constant(index)
        if number is not None:
            check(0 <= number < count, f"tile index {number} out of range [0, {count})")
            return number
        check(isinstance(index, tl.tensor) and not index.type.is_block(),
              f"a tile index must be an integer, a scalar tensor or one of them per dimension, got {index}")
        return _semantic.cast(index, tl.int32)
    coords = list(index)
    check(len(coords) == len(grid), f"the tile index has {len(coords)} coordinates for a {len(grid)}-D source")
    number = 0
    for i, (coord, extent) in enumerate(zip(coords, grid)):
        fixed = constant(coord)
        if fixed is not None:
            check(0 <= fixed < extent, f"tile coordinate {i} ({fixed}) out of range [0, {extent})")
            coord = fixed
        else:
            check(isinstance(coord, tl.tensor) and not coord.type.is_block(),
                  f"tile coordinate {i} must be an integer or a scalar tensor, got {coord}")
            coord = _semantic.cast(coord, tl.int32)
        if isinstance(number, int) and isinstance(coord, int):
            number = number * extent + coord
        else:
            number = _semantic.add(_semantic.mul(_semantic.to_tensor(number), extent, True), coord, True)
    return number


def _as_rows(x, grid: list, tile: list, _semantic):
    """x as [tiles, tile elements], tiles numbered row-major over the grid."""
    rank = len(grid)
    split = tl.reshape(x, [d for pair in zip(grid, tile) for d in pair], _semantic=_semantic)
    if rank > 1:
        split = tl.permute(split, [2 * i for i in range(rank)] + [2 * i + 1 for i in range(rank)],
                           _semantic=_semantic)
    return tl.reshape(split, [math.prod(grid), math.prod(tile)], _semantic=_semantic)


def _from_rows(rows, grid: list, tile: list, _semantic):
    """The inverse of _as_rows."""
    rank = len(grid)
    split = tl.reshape(rows, grid + tile, _semantic=_semantic)
    if rank > 1:
        split = tl.permute(split, [d for i in range(rank) for d in (i, rank + i)], _semantic=_semantic)
    return tl.reshape(split, [g * t for g, t in zip(grid, tile)], _semantic=_semantic)


def _row_mask(number, tiles: int, _semantic):
    """[tiles, 1]: true on row `number`."""
    rows = tl.expand_dims(tl.arange(0, tiles, _semantic=_semantic), 1, _semantic=_semantic)
    return _semantic.equal(rows, _semantic.to_tensor(number))


@tl.builtin
def extract_tile(x, index, tile_shape, _semantic=None):
    """The tile of `x` at `index` (module docstring), of shape `tile_shape`."""
    check(isinstance(x, tl.tensor) and x.type.is_block(), f"extract_tile needs a tensor, got {x}")
    source, tile = [int(d) for d in x.shape], _static_shape(tile_shape, "tile_shape")
    grid = _grid(source, tile)
    number = _tile_number(index, grid, _semantic)
    rows = _as_rows(x, grid, tile, _semantic)
    which = tl.full([1, math.prod(tile)], 0, tl.int32, _semantic=_semantic)
    which = _semantic.add(which, _semantic.to_tensor(number), True)
    picked = tl.gather(rows, which, 0, _semantic=_semantic)
    return tl.reshape(picked, tile, _semantic=_semantic)


@tl.builtin
def insert_tile(x, tile, index, _semantic=None):
    """`x` with its tile at `index` (module docstring) replaced by `tile`."""
    check(isinstance(x, tl.tensor) and x.type.is_block() and isinstance(tile, tl.tensor) and tile.type.is_block(),
          f"insert_tile needs a tensor and a tile, got {x} and {tile}")
    check(x.dtype == tile.dtype, f"the tile's element type {tile.dtype} is not the source's {x.dtype}")
    source, shape = [int(d) for d in x.shape], [int(d) for d in tile.shape]
    grid = _grid(source, shape)
    number = _tile_number(index, grid, _semantic)
    rows = _as_rows(x, grid, shape, _semantic)
    flat_tile = tl.reshape(tile, [1, math.prod(shape)], _semantic=_semantic)
    replaced = tl.where(_row_mask(number, math.prod(grid), _semantic), flat_tile, rows, _semantic=_semantic)
    return _from_rows(replaced, grid, shape, _semantic)
