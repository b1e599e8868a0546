"""Stores into a local buffer that nothing reads, dropped.

split-loops-at-bounds gives a masked tile's loop a part past the mask's bound: `tl.where(cols < n, f(x), 0)`
over a 2048-lane tile stores zeros into lanes n .. 2047 of the tile's buffer. When every later read of
that buffer is of lanes below n (a masked store of the result, the lanes a loop over [0, n) combines),
the zeros are written and never read (LLVM, not knowing n <= 2048, keeps them as memsets), and a row's
tiles cost by the tile's width, not the row's:

    scf.for %i = %n to %c2048 {                    scf.for %i = %n to %c2048 {
      memref.store %zero, %xhat[%i]                  %s = memref.load %sum[]
      %x = memref.load %xhat[%i]            =>       memref.store (%s + %zero), %sum[]
      %s = memref.load %sum[]                      }
      memref.store (%s + %x), %sum[]               scf.for %i = %c0 to %n { .. memref.load %xhat[%i] .. }
    }
    scf.for %i = %c0 to %n { .. memref.load %xhat[%i] .. }

In two steps. First, in a loop's body, a load of the element the same iteration stored before it (the same
buffer, the same index, nothing between that may write that buffer) takes the stored value. Then the
stores into a local buffer (memref.alloca or memref.alloc used only by loads, stores, views from its first
element, selects between such buffers and its deallocation) that no needed load reads are dropped. A load
is needed when what it reads feeds an operation with another effect (a store into an argument, a call, a
branch's condition, a loop's bounds or yields) or a store some needed load reads; it may read a store's
lanes unless both index by the induction variables of loops whose ranges provably do not meet (one ends
where the other starts, or before), or one by a constant outside the other's range. Bounds compare as SSA
values once clamps that cannot change them are taken off (`max(min(%n, 2048), 0)` is %n when %n is
`min(max(.., 0), 2048)`), or by their constant intervals. An access in a loop nested inside another loop
below the buffer's definition may run again with other bounds: it counts as reaching every lane. What is
left of such a loop (sums adding zero) LLVM folds.

Tutorial 05's layer-norm backward (`_layer_norm_bwd_dx_fused`, 4096 fp16 rows, one thread) keeps five such
tiles. On a Zen 3, 2048-lane tiles: rows of 1024 5.73 -> 3.89 ms, of 1536 6.28 -> 5.57 ms, of 2048 (no
lanes past the bound) 6.9 ms before and after; on a Sapphire Rapids Xeon, rows of 1536 11.1 -> 9.2 ms (one
thread), 0.80 -> 0.67 ms (16 threads) (bench/RESULTS.md).
"""
from __future__ import annotations

from typing import Optional

from ..ir_walk import accessed, ancestors, collect_ops, constant_int, defining_op, interval, through_views

_BUFFERS = ("memref.alloca", "memref.alloc")
_LOOPS = ("scf.for", "scf.while", "scf.parallel", "scf.forall", "affine.for")
_EVERYWHERE = (None, None)       # a range that reaches every lane
# memref operations that neither write memory nor have another effect
_PURE_MEMREF = ("memref.load", "memref.subview", "memref.cast", "memref.reinterpret_cast", "memref.dim",
                "memref.extract_strided_metadata", "memref.extract_aligned_pointer_as_index") + _BUFFERS


def drop_unread_stores(module) -> None:
    for loop in collect_ops(module, lambda op: op.name == "scf.for"):
        _forward_stored_values(loop.regions[0].blocks[0])
    for function in collect_ops(module, lambda op: op.name == "func.func"):
        _drop_in(function)


def _drop_in(function) -> None:
    """Drops the stores into the function's local buffers that no needed load reads. Needed: what an
    operation with another effect (a store into an argument, a call, a branch's condition, a loop's
    bounds and yields) uses, and, for a needed load of a local buffer, the stores that may write its lanes;
    a load feeding only unneeded stores (a partial sum's tail added to itself) is not."""
    writers = {}                        # load -> the stores whose lanes it may read
    candidates = set()
    for buffer in collect_ops(function, local_rank_one_buffer):
        accesses = tile_accesses(buffer.results[0])
        if accesses is None:
            continue
        stores, loads, _ = accesses
        candidates.update(stores)
        written = {store: lanes(store, buffer) for store in stores}
        for load in loads:
            read = lanes(load, buffer)
            writers.setdefault(load, []).extend(x for x in stores if not _disjoint(written[x], read))
    needed, work = set(), []

    def need(op):
        if op not in needed:
            needed.add(op)
            work.append(op)
    for op in collect_ops(function, lambda op: op != function.operation):
        if op not in candidates and not _free(op):
            need(op)
    while work:
        op = work.pop()
        for operand in op.operands:
            owner = defining_op(operand)
            if owner is not None:
                need(owner)
        for store in writers.get(op, ()):
            need(store)
    for store in candidates - needed:
        store.erase()


def local_rank_one_buffer(op) -> bool:
    from mlir import ir
    return op.name in _BUFFERS and ir.MemRefType(op.results[0].type).rank == 1


def _free(op) -> bool:
    """Whether `op` matters only through its results: arithmetic, a view, an index, a read, a buffer."""
    return op.name.startswith(("arith.", "math.")) or op.name in _PURE_MEMREF


def _forward_stored_values(body) -> None:
    """A load after a store of the same buffer and index in `body` (one block) takes the stored value,
    where nothing between may write that buffer. Only local buffers: nothing else aliases them."""
    stored = {}                       # (memref, index) -> (the value stored there, the buffer under memref)
    for op in list(body.operations):
        op = op.operation
        if op.name == "memref.store":
            memref, indices = accessed(op)
            root = _buffer_under(memref)
            if root is None:
                stored = {}           # a select of buffers: it may write any of them
            elif _is_local(root):
                stored = {key: v for key, v in stored.items() if v[1] != root}
                if len(indices) == 1:
                    stored[memref, indices[0]] = (op.operands[0], root)
        elif op.name == "memref.load":
            memref, indices = accessed(op)
            found = stored.get((memref, indices[0])) if len(indices) == 1 else None
            if found is not None:
                op.results[0].replace_all_uses_with(found[0])
                op.erase()
        elif not _harmless(op):
            stored = {}


def _buffer_under(memref):
    """The memref under views of `memref` (an allocation or an argument), or None under a select."""
    root = through_views(memref)
    op = defining_op(root)
    return None if op is not None and op.name == "arith.select" else root


def _harmless(op) -> bool:
    """Whether `op` writes no memory: arithmetic, a view, a read, or a branch of only such ops (the
    masked loads' `scf.if`)."""
    if op.name in ("scf.if", "scf.yield"):
        return all(_harmless(inner.operation) for region in op.regions for block in region.blocks
                   for inner in block.operations)
    return op.name.startswith(("arith.", "math.")) or op.name in _PURE_MEMREF and op.name not in _BUFFERS


def _is_local(memref) -> bool:
    op = defining_op(memref)
    return op is not None and op.name in _BUFFERS


def tile_accesses(buffer) -> Optional[tuple]:
    """([stores into `buffer` or its views], [loads of it, its views and selects of it], [stores through
    selects of it]), or None when another operation uses any of them (a call, a copy, a yield: then
    anything may read it). A store through a select may write another buffer too: it is not among the
    first stores."""
    stores, loads, selected, pending, seen = [], [], [], [(buffer, True)], set()
    while pending:
        value, plain = pending.pop()
        if value in seen:
            continue
        seen.add(value)
        for use in value.uses:
            user = use.owner
            name = user.name
            if name == "memref.load":
                loads.append(user)
            elif name == "memref.store" and use.operand_number == 1:
                (stores if plain else selected).append(user)
            elif name == "memref.dealloc":
                continue
            elif name == "memref.cast" or (name == "memref.subview" and _from_first(user)):
                pending.append((user.results[0], plain))
            elif name == "arith.select":
                pending.append((user.results[0], False))
            else:
                return None
    return stores, loads, selected


def _from_first(subview) -> bool:
    """Whether a memref.subview starts at its source's first element with unit steps (its lanes are the
    source's lanes)."""
    from mlir import ir
    offsets = ir.DenseI64ArrayAttr(subview.attributes["static_offsets"])
    strides = ir.DenseI64ArrayAttr(subview.attributes["static_strides"])
    return list(offsets) == [0] and list(strides) == [1]


def lanes(access, buffer) -> tuple:
    """(first, end) of the lanes `access` can reach, as index values or ints, or _EVERYWHERE."""
    _, indices = accessed(access)
    if len(indices) != 1:
        return _EVERYWHERE
    index = indices[0]
    constant = constant_int(index)
    if constant is not None:
        return constant, constant + 1
    loop = loop_of(index)
    if loop is None or not runs_once_per_buffer(loop, buffer):
        return _EVERYWHERE
    return loop.operands[0], loop.operands[1]


def loop_of(index):
    """The scf.for whose induction variable `index` is, or None."""
    from mlir import ir
    if not isinstance(index.owner, ir.Block) or ir.BlockArgument(index).arg_number != 0:
        return None
    loop = index.owner.owner
    return loop.operation if loop is not None and loop.operation.name == "scf.for" else None


def runs_once_per_buffer(loop, buffer) -> bool:
    """Whether no loop lies between `loop` and the block that defines `buffer`: then the loop's bounds are
    the same each time the buffer's lanes are reached."""
    home = buffer.parent
    for op in ancestors(loop):
        if op == home:
            return True
        if op.name in _LOOPS:
            return False
    return False


def _disjoint(a: tuple, b: tuple) -> bool:
    if a is _EVERYWHERE or b is _EVERYWHERE:
        return False
    return at_most(a[1], b[0]) or at_most(b[1], a[0])


def at_most(x, y) -> bool:
    """Whether x <= y always: the same value once clamps that cannot change them are off, or by their
    intervals."""
    if not isinstance(x, int) and not isinstance(y, int) and _without_redundant_clamps(x) == _without_redundant_clamps(y):
        return True
    high = x if isinstance(x, int) else interval(x)[1]
    low = y if isinstance(y, int) else interval(y)[0]
    return high is not None and low is not None and high <= low


def _without_redundant_clamps(value):
    """`value` without the min and max by constants that cannot change it (its interval lies inside)."""
    while True:
        op = defining_op(value)
        if op is None or op.name not in ("arith.minsi", "arith.maxsi"):
            return value
        a, b = op.operands
        if constant_int(a) is not None:
            a, b = b, a
        bound = constant_int(b)
        if bound is None:
            return value
        low, high = interval(a)
        keeps = (high is not None and high <= bound) if op.name == "arith.minsi" else (low is not None and low >= bound)
        if not keeps:
            return value
        value = a
