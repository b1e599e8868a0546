"""Tiles recomputed where they are read, instead of kept in a buffer.

A row kernel computes tiles from its inputs in one loop and reads them again in a later one, after a
reduction over the whole row has finished: tutorial 05's layer-norm backward keeps xhat = (x - mean) * rstd
and wdy = w * dy for its dx loop, which needs c1 and c2, the sums of the first. Each such tile is a local
buffer as wide as the row's block (8 KiB for 2048 f32 lanes). That kernel keeps five of them, which with the
row's own data no longer fit a 48 KiB L1. When every read of a tile can compute its element again from
memory that nothing writes during the launch, the read does, and the tile goes:

    scf.for %i = %c0 to %n {                            scf.for %i = %c0 to %n {
      %x = memref.load %X[%i]                             %x = memref.load %X[%i]
      %d = arith.subf %x, %mean                           %d = arith.subf %x, %mean
      %h = arith.mulf %d, %rstd                           %h = arith.mulf %d, %rstd
      memref.store %h, %xhat[%i]               =>         (sums of %h)
      (sums of %h)                                      }
    }                                                   scf.for %j = %c0 to %n {
    scf.for %j = %c0 to %n {                              %x2 = memref.load %X[%j]
      %t = memref.load %xhat[%j]                          %d2 = arith.subf %x2, %mean
      (uses of %t)                                        %t = arith.mulf %d2, %rstd
    }                                                     (uses of %t)
                                                        }

What qualifies (in a function whose tiles together take more than ROOM_BYTES, a small L1: where they fit,
reading a tile back costs no more than computing it again):
- the tile: a local rank-1 buffer that one store writes and only loads read (through views from its first
  element; unread_stores.tile_accesses), and no store reaches through a select of it and another buffer.
- the store: in an scf.for at its induction variable, the loop running once each time the buffer is defined.
  Its value is computed in the loop's body, in at most MAX_OPS operations, from constants, values defined
  before the loop, the induction variable, and loads. Those loads may sit in scf.if branches, as a masked
  load's do, and read only views of arguments in the function's DISJOINT_ARGUMENTS that no operation of the
  function writes. The launcher runs a variant without that attribute when such an argument overlaps
  written memory, so nothing changes them during the launch. The computation is cheap arithmetic: no
  division, no math functions.
- each read: at the induction variable of an scf.for that runs once each time the buffer is defined. It
  lies in the block of the store's loop, after it (or nested in an operation after it), so everything the
  value is computed from is still in scope. Its lanes lie within the store's: its loop starts no lower and
  ends no higher, compared as unread_stores compares lanes.
- at most MAX_READS reads, each of which computes the value again. A read through a select of the tile and
  another buffer (tutorial 05's partial dw: the tile, or the tile plus what another program stored, by
  whether this program came first) becomes a select of the recomputed value and a read of the other buffer.

A tile whose store qualifies but one of its reads does not is kept, and the pass says so ("gave up on ...":
the kernel's facts and SPINE_DUMP_PASSES' pass list). After the reads go, the store goes, and LLVM drops the
buffer.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..ir_types import bits
from ..ir_walk import accessed, ancestor_in_block, collect_ops, defining_op, inside, through_views
from .read_only import read_only_arguments
from .unread_stores import tile_accesses, at_most, lanes, local_rank_one_buffer, loop_of, runs_once_per_buffer

# Tiles are recomputed only in a function whose local rank-1 buffers together take more than this: the
# L1 data cache of the smallest cores targeted (SpacemiT X60, AMD Zen 3: 32 KiB). Where they fit, reading
# a tile back is no slower than computing it again: tutorial 05's dx kernel in 1024-lane tiles (five of
# 4 KiB) ran 10-20 % slower recomputed on a Sapphire Rapids Xeon, one thread, and in 2048-lane tiles
# (five of 8 KiB) 22 % faster (bench/RESULTS.md).
ROOM_BYTES = 32 << 10
MAX_OPS = 16      # operations a recomputed value may take (each read runs them again)
MAX_READS = 2     # reads of one tile that may each recompute it
# what a recomputed value may be made of besides loads of read-only memory: cheap arithmetic
_DEAR = ("arith.divf", "arith.divsi", "arith.divui", "arith.remf", "arith.remsi", "arith.remui",
         "arith.ceildivsi", "arith.ceildivui", "arith.floordivsi")
_VIEWS = ("memref.subview", "memref.cast", "memref.reinterpret_cast")


@dataclass
class _Recipe:
    """How a stored value is computed: the operations of the store loop's body it takes, in order."""
    loop: object          # the store's scf.for
    value: object         # the stored value
    ops: list


def recompute_tiles(module) -> Optional[str]:
    """Rewrites every qualifying tile; returns None, or "gave up on ..." for tiles it kept."""
    refused, candidates = [], 0
    for function in collect_ops(module, lambda op: op.name == "func.func"):
        read_only = read_only_arguments(function)
        buffers = collect_ops(function, local_rank_one_buffer)
        if not read_only or _bytes(buffers) <= ROOM_BYTES:
            continue
        for buffer in buffers:
            reason = _recompute(buffer, read_only)
            if reason is not None:
                candidates += 1
                if reason:
                    refused.append(reason)
    if refused:
        return f"gave up on {len(refused)} of {candidates} tiles computed from read-only memory (first: {refused[0]})"
    return None


def _bytes(buffers) -> int:
    """What the buffers of static shape take together."""
    from mlir import ir
    total = 0
    for buffer in buffers:
        ty = ir.MemRefType(buffer.results[0].type)
        if ty.has_static_shape:
            total += ty.shape[0] * bits(ty.element_type) // 8
    return total


def _recompute(buffer, read_only: set) -> Optional[str]:
    """None when `buffer` is no candidate (no single store of a value computed from read-only memory), ""
    when it was recomputed at its reads, else why not."""
    tile = buffer.results[0]
    accesses = tile_accesses(tile)
    if accesses is None or len(accesses[0]) != 1 or accesses[2]:
        return None          # not one store, or one through a select that may write the tile
    store, loads = accesses[0][0].operation, [load.operation for load in accesses[1]]
    recipe = _recipe(store, buffer, read_only)
    if recipe is None:
        return None
    unused = [load for load in loads if _feeds_nothing(load)]
    loads = [load for load in loads if load not in unused]
    if len(loads) > MAX_READS:
        return f"a tile read {len(loads)} times"
    for load in loads:
        why = _unreadable(load, store, recipe, buffer)
        if why:
            return why
    for load in loads:
        _recompute_at(load, recipe, tile)
    store.erase()      # what reads it now is only what feeds nothing (LLVM drops both)
    return ""


def _feeds_nothing(op, depth: int = 8) -> bool:
    """Whether `op`'s results reach no operation but arithmetic whose results reach nothing either (what is
    left of a tail loop whose stores unread_stores dropped)."""
    if depth == 0:
        return False
    return all(use.owner.operation.name.startswith("arith.") and _feeds_nothing(use.owner.operation, depth - 1)
               for result in op.results for use in result.uses)


def _recipe(store, buffer, read_only: set) -> Optional[_Recipe]:
    """How the store's value is computed, if it qualifies (the module's docstring)."""
    _, indices = accessed(store)
    if len(indices) != 1:
        return None                  # through a view of one lane
    index = indices[0]
    loop = loop_of(index)
    if loop is None or not runs_once_per_buffer(loop, buffer) or store.parent != loop:
        return None
    ops, seen = [], set()

    def take(value) -> bool:
        op = defining_op(value)
        if op is None:
            return value == index or not inside(value.owner.owner, loop)
        if not inside(op, loop) or op in seen:
            return True
        if op.parent != loop or not _cheap(op, read_only):
            return False
        seen.add(op)
        if not all(take(v) for v in op.operands) or not all(take(v) for v in _used_in_regions(op)):
            return False
        ops.append(op)
        return len(ops) <= MAX_OPS

    value = store.operands[0]
    return _Recipe(loop, value, ops) if take(value) else None


def _cheap(op, read_only: set) -> bool:
    """Whether `op` may be computed again: cheap arithmetic, a view, a load of read-only memory, or an
    scf.if whose branches hold only such operations (a masked load)."""
    if op.name == "memref.load":
        return through_views(op.operands[0]) in read_only
    if op.name == "scf.if":
        return all(inner.name == "scf.yield" or _cheap(inner, read_only)
                   for inner in _nested(op))
    return (op.name.startswith("arith.") and op.name not in _DEAR) or op.name in _VIEWS


def _nested(op) -> list:
    return [inner.operation for region in op.regions for block in region.blocks for inner in block.operations]


def _used_in_regions(op) -> list:
    """The values the operations in `op`'s regions use that are defined outside `op`."""
    found = []
    for inner in _nested(op):
        found += [v for v in inner.operands if not _defined_in(v, op)]
        found += _used_in_regions(inner)
    return found


def _defined_in(value, op) -> bool:
    owner = defining_op(value)
    return inside(owner, op) if owner is not None else inside(value.owner.owner, op)


def _unreadable(load, store, recipe: _Recipe, buffer) -> str:
    """Why `load` cannot compute its element again, or "" when it can."""
    source, indices = accessed(load)
    if len(indices) != 1:
        return "a read through a view of one lane"
    loop = loop_of(indices[0])
    root = through_views(source)
    if root != buffer.results[0] and _choice(root, buffer.results[0]) is None:
        return "a read through views of a buffer's select"
    if loop is None:
        return "a read not at a loop's induction variable"
    if not runs_once_per_buffer(loop, buffer):
        return "a read in a loop nested in another"
    after = ancestor_in_block(load, recipe.loop.block)
    if after is None or not _is_after(after, recipe.loop):
        return "a read not after the loop that stores the tile"
    stored, read = lanes(store, buffer), lanes(load, buffer)
    if not (at_most(stored[0], read[0]) and at_most(read[1], stored[1])):
        return "a read of lanes the store may not write"
    return ""


def _is_after(op, other) -> bool:
    """Whether `op` comes after `other` in their block."""
    order = [x.operation for x in other.block.operations]
    return order.index(other) < order.index(op)


def _recompute_at(load, recipe: _Recipe, tile) -> None:
    """The recipe's operations cloned before `load`, its induction variable the load's index, and the
    load's result replaced by the clone of the stored value; a read through a select of the tile and another
    buffer becomes a select of that value and a read of the other buffer."""
    from mlir import ir
    from mlir.dialects import arith, memref
    source, (index,) = accessed(load)
    mapped = {recipe.loop.regions[0].blocks[0].arguments[0]: index}
    with ir.InsertionPoint(load):
        for op in recipe.ops:
            clone = op.clone(ip=ir.InsertionPoint.current)
            _remap(clone, mapped)
            mapped.update(zip(op.results, clone.results))
        value = mapped.get(recipe.value, recipe.value)     # defined before the loop: as it is
        root = through_views(source)
        if root != tile:
            select, ours = _choice(root, tile)
            other = memref.LoadOp(_rebased(source, root, select.operands[3 - ours]), [index]).result
            chosen = (value, other) if ours == 1 else (other, value)
            value = arith.SelectOp(select.operands[0], *chosen).result
    load.results[0].replace_all_uses_with(value)
    load.erase()


def _choice(root, tile) -> Optional[tuple]:
    """(the arith.select that `root` is, the position of `tile` among its operands: 1 or 2) when it chooses
    between `tile` and another buffer by a scalar condition, else None."""
    from mlir import ir
    select = defining_op(root)
    if select is None or select.name != "arith.select" or not isinstance(select.operands[0].type, ir.IntegerType):
        return None
    choices = list(select.operands[1:])
    if choices.count(tile) != 1:
        return None
    return select, 1 + choices.index(tile)


def _rebased(view, root, other):
    """`view`, a chain of views of `root`, as the same chain of views of `other` (cloned here)."""
    from mlir import ir
    if view == root:
        return other
    op = defining_op(view)
    source = _rebased(op.operands[0], root, other)
    clone = op.clone(ip=ir.InsertionPoint.current)
    clone.operands[0] = source
    return clone.results[0]


def _remap(op, mapped: dict) -> None:
    """Replaces the operands of `op` and of the operations nested in it that `mapped` maps."""
    for i, operand in enumerate(op.operands):
        if operand in mapped:
            op.operands[i] = mapped[operand]
    for inner in _nested(op):
        _remap(inner, mapped)
