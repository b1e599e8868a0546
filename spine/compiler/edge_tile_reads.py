"""Reads of an edge tile go to the argument inside the mask's window, and to the fill value outside it.

A masked tl.load from an argument the kernel never writes reads whole tiles in place and copies only the
edge tiles (to_linalg/load.py); after bufferization:

    %tile = scf.if %partial {                       (%partial: some window size %n_d differs from the tile's)
      linalg.fill ins(%other) outs(%buf, or subviews of it)
      linalg.copy ins(reinterpret_cast %arg to offset: [%o], sizes: [%n], strides: [%s])
                  outs(subview %buf[0] [%n] [1])
      scf.yield %buf
    } else {
      scf.yield reinterpret_cast %arg to offset: [%o], sizes: [1024], strides: [%s]
    }

A row softmax over 1000 columns in tiles of 1024 has an edge tile in every program, and its copy (a call
of the C library's memmove on x86) took an eighth of the kernel's time. Element j of either branch's tile
is the argument's element j when j lies in the window (j < %n in every dimension), else %other. So once
the loops are formed, each read of the tile becomes

    scf.if (j < %n) { memref.load (reinterpret_cast %arg ... sizes: [1024])[j] } else { %other }

and loop_splitting.py splits the loop around it at %n, where the condition becomes a constant: the loop
reads the argument in place below %n and uses %other from there. When no read of the tile is left, the
branch with its copy goes. Only reads whose index, in each dimension the window can cut, is a loop's index
(plus a value fixed in that loop: the split applies) or fixed in the innermost loop around the read (a
reduction's first element: one test outside the element loops) are rewritten. Other reads keep the copy,
which stays correct, since nothing writes the tile (checked).

Reading the argument later than the copy did is sound because these arguments are ones the kernel never
writes and the launcher has checked that no written argument overlaps them (to_linalg.convert_ttir's
`direct_loads`), or, for the branches written_tiles.py makes of an argument the kernel writes, because
nothing writes memory other than local buffers between the copy and the tile's last read.

Two steps: `mark_edge_tiles` recognises the branches while the fill and the copy are still single linalg
ops, and marks them; `read_edge_tiles_in_place` rewrites the reads after the loops are formed.
"""
from __future__ import annotations

from typing import Optional

from ..ir_walk import (at_origin, collect_ops, constant_int, defined_outside, defining_op, inside,
                      offsets_sizes_strides, same_place, through_casts, view_sizes, yielded)

MARK = "spine.edge_tile"


def mark_edge_tiles(module) -> None:
    """Marks every scf.if that yields an edge tile of the form above (on memrefs, before the loops)."""
    from mlir import ir
    for branch in collect_ops(module, lambda op: op.name == "scf.if" and len(op.results) == 1):
        if _is_edge_tile(branch):
            branch.attributes[MARK] = ir.UnitAttr.get()


def read_edge_tiles_in_place(module) -> None:
    """Rewrites the reads of every marked tile (after convert-linalg-to-loops)."""
    for branch in collect_ops(module, lambda op: op.name == "scf.if" and MARK in op.attributes):
        del branch.attributes[MARK]
        _read_in_place(branch)


# ------------------------------------------------------------------------------------------ recognising

def _is_edge_tile(branch) -> bool:
    from mlir import ir
    if not isinstance(branch.results[0].type, ir.MemRefType) or len(branch.regions[1].blocks) == 0:
        return False
    whole = defining_op(yielded(branch.regions[1].blocks[0], 0))
    if whole is None or whole.name != "memref.reinterpret_cast" or whole.results[0].type != branch.results[0].type:
        return False
    if not all(defined_outside(v, branch) for v in whole.operands):
        return False
    casts = _then_ops(branch, "memref.reinterpret_cast")
    if len(casts) != 1 or not same_place(casts[0], whole):
        return False
    window = casts[0]
    sizes = view_sizes(window)
    if any(isinstance(n, int) and n > full for n, full in zip(sizes, _shape(branch))):
        return False
    if not all(isinstance(n, int) or defined_outside(n, branch) for n in sizes):
        return False
    return _whole_when_not_partial(branch, sizes) and _fill_and_copy_only(branch, window, sizes)


def _shape(branch) -> list:
    from mlir import ir
    return list(ir.MemRefType(branch.results[0].type).shape)


def _whole_when_not_partial(branch, sizes) -> bool:
    """The condition is an `or` of `n_d != full_d` covering every dynamic size: the else branch runs only
    when the window is the whole tile."""
    tested = dimensions_tested(branch.operands[0], sizes, _shape(branch))
    return all(isinstance(n, int) or d in tested for d, n in enumerate(sizes))


def dimensions_tested(condition, sizes, shape) -> set:
    """The dimensions d whose dynamic window size sizes[d] the i1 `condition`, an `or` of terms, tests by
    a term `sizes[d] != shape[d]` (either way round)."""
    terms, pending = [], [condition]
    while pending:
        value = pending.pop()
        op = defining_op(value)
        if op is not None and op.name == "arith.ori":
            pending += list(op.operands)
        else:
            terms.append(op)
    tested = set()
    for op in terms:
        if op is None or op.name != "arith.cmpi" or _predicate(op) != 1:       # 1: ne
            continue
        for size_side, full_side in (tuple(op.operands), tuple(op.operands)[::-1]):
            for d, (n, full) in enumerate(zip(sizes, shape)):
                if not isinstance(n, int) and n == size_side and constant_int(full_side) == full:
                    tested.add(d)
    return tested


def _fill_and_copy_only(branch, window, sizes) -> bool:
    """The then branch yields a buffer written only there, by fills of one value defined outside the
    branch and by one copy from `window` into the buffer's window at its origin."""
    block = branch.regions[0].blocks[0]
    buffer = through_casts(yielded(block, 0))
    fills, copies = set(), []
    for use in buffer.uses:
        user = use.owner
        if not inside(user, branch):
            return False
        if user.name == "memref.cast":
            if any(u.owner.name != "scf.yield" or u.owner.parent != branch for u in user.results[0].uses):
                return False
        elif user.name == "memref.subview" or user.name == "linalg.fill":
            targets = user.results[0].uses if user.name == "memref.subview" else [use]
            for target in targets:
                writer = target.owner
                if writer.name == "linalg.fill" and target.operand_number == len(writer.operands) - 1:
                    fills.add(writer.operands[0])
                elif (writer.name == "linalg.copy" and target.operand_number == 1
                      and user.name == "memref.subview" and at_origin(user)):
                    copies.append((writer, user))
                else:
                    return False
        elif user.name != "scf.yield":
            return False
    if len(copies) != 1 or len(fills) != 1 or not defined_outside(next(iter(fills)), branch):
        return False
    copy, destination = copies[0]
    return copy.operands[0] == window.results[0] and view_sizes(destination) == sizes


# ------------------------------------------------------------------------------------------ rewriting

def _read_in_place(branch) -> None:
    from mlir import ir
    then_block = branch.regions[0].blocks[0]
    windows = _then_ops(branch, "memref.reinterpret_cast")
    fill = _fill_value(branch)
    if len(windows) != 1 or fill is None or not _only_read(branch.results[0]):
        return
    bounds = [None if n == full else n for n, full in zip(view_sizes(windows[0]), _shape(branch))]
    whole_op = defining_op(yielded(branch.regions[1].blocks[0], 0))
    whole = None
    for load, indices in _reads(branch.results[0]):
        if not all(bound is None or _splittable_or_fixed(index, load) for index, bound in zip(indices, bounds)):
            continue
        if whole is None:
            whole = whole_op.clone(ip=ir.InsertionPoint.after(branch)).results[0]
        _read_from(load, indices, bounds, whole, fill, ir.InsertionPoint(whole.owner))
    for view in [use.owner for use in branch.results[0].uses if use.owner.name == "memref.subview"]:
        if not list(view.results[0].uses):
            view.erase()
    if not list(branch.results[0].uses):
        buffer = through_casts(yielded(then_block, 0))
        branch.erase()
        owner = defining_op(buffer)
        if owner is not None and owner.name in ("memref.alloca", "memref.alloc") and not list(buffer.uses):
            owner.erase()


def _fill_value(branch) -> Optional[object]:
    """The one value the then branch stores from outside itself (its fill loops' value)."""
    stored = {op.operands[0] for op in _then_ops(branch, "memref.store") if defined_outside(op.operands[0], branch)}
    return next(iter(stored)) if len(stored) == 1 else None


def _only_read(view) -> bool:
    """Whether nothing writes the memref `view` or any view of it."""
    for use in view.uses:
        user = use.owner
        if user.name in ("memref.subview", "memref.cast", "memref.reinterpret_cast"):
            if not _only_read(user.results[0]):
                return False
        elif user.name not in ("memref.load", "memref.dim"):
            return False
    return True


def _reads(tile) -> list:
    """(memref.load, the tile's index in each dimension) for the loads of `tile` and of its subviews that
    keep every dimension (or drop them all) with unit steps."""
    from mlir import ir
    found = []
    for use in tile.uses:
        user = use.owner
        if user.name == "memref.load" and user.operands[0] == tile:
            found.append((user, list(user.operands)[1:]))
        elif user.name == "memref.subview":
            offsets, _, strides = offsets_sizes_strides(user)
            rank = ir.MemRefType(user.results[0].type).rank
            if any(s != 1 for s in strides) or rank not in (0, len(offsets)):
                continue
            for inner in user.results[0].uses:
                load = inner.owner
                if load.name != "memref.load" or load.operands[0] != user.results[0]:
                    continue
                local = list(load.operands)[1:] or [0] * len(offsets)
                found.append((load, [(offset, index) for offset, index in zip(offsets, local)]))
    return found


def _splittable_or_fixed(index, load) -> bool:
    """Whether the window test of this index costs nothing per element: the index is a loop's index, or it
    plus a value fixed in that loop (loop_splitting.py splits the loop at the bound), or the index is fixed
    in the innermost loop around the load (a test per iteration of a loop outside the element loops)."""
    offset, local = index if isinstance(index, tuple) else (0, index)
    if _fixed(offset, load) and _fixed(local, load):
        return True
    return _loop_index(local) is not None and (isinstance(offset, int) or defined_outside(offset, _loop_index(local)))


def _loop_index(value):
    """The scf.for whose index `value` is, or None."""
    from mlir import ir
    if isinstance(value, int) or not isinstance(value.owner, ir.Block):
        return None
    loop = value.owner.owner
    return loop if loop.name == "scf.for" and value == value.owner.arguments[0] else None


def _fixed(value, op) -> bool:
    """Whether `value` is the same in every iteration of the innermost loop around `op` (or op is in none)."""
    if isinstance(value, int):
        return True
    loop = op.parent
    while loop is not None and loop.name not in ("scf.for", "scf.parallel", "scf.while", "func.func"):
        loop = loop.parent
    return loop is None or loop.name == "func.func" or defined_outside(value, loop)


def _then_ops(branch, name: str) -> list:
    """The operations named `name` in the then branch of `branch`, at any depth."""
    then_block = branch.regions[0].blocks[0]

    def in_then(op) -> bool:
        while op is not None and op.parent != branch:
            op = op.parent
        return op is not None and op.block == then_block
    return collect_ops(branch, lambda op: op.name == name and in_then(op))


def _read_from(load, indices, bounds, whole, fill, outside_loops) -> None:
    """`outside_loops`: where constants go, so that loop_splitting.py sees them as fixed in the loop."""
    from mlir import ir
    from mlir.dialects import arith, memref, scf
    with ir.InsertionPoint(load), load.location:
        index_type = ir.IndexType.get()

        def value(n):
            if not isinstance(n, int):
                return n
            with outside_loops:
                return arith.ConstantOp(index_type, n).result
        positions, inside_window = [], None
        for index, bound in zip(indices, bounds):
            if isinstance(index, tuple):
                offset, local = index
                index = local if offset == 0 else arith.AddIOp(value(offset), value(local)).result
            positions.append(value(index))
            if bound is not None:
                below = arith.CmpIOp(arith.CmpIPredicate.slt, positions[-1], value(bound)).result
                inside_window = below if inside_window is None else arith.AndIOp(inside_window, below).result
        element = load.results[0].type
        if inside_window is None:
            read = memref.LoadOp(whole, positions).result
        else:
            branch = scf.IfOp(inside_window, [element], has_else=True)
            with ir.InsertionPoint(branch.then_block):
                scf.YieldOp([memref.LoadOp(whole, positions).result])
            with ir.InsertionPoint(branch.else_block):
                scf.YieldOp([fill])
            read = branch.results[0]
    load.results[0].replace_all_uses_with(read)
    load.erase()


def _predicate(op) -> int:
    from mlir import ir
    return ir.IntegerAttr(op.attributes["predicate"]).value
