"""split-tile-branches: an scf.if that yields several tiles computed independently becomes one scf.if per
tile.

Each masked load of a kernel bufferizes to its own branch (to_linalg/load.py): the edge tile copied into a
buffer of its own, or the argument's whole tile read in place. Loads under one mask have one condition,
and canonicalization combines their branches into one with several results:

    %t:2 = scf.if %partial {                          %x = scf.if %partial {
      fill %bx; copy (window of %arg4) into %bx          fill %bx; copy (window of %arg4) into %bx
      fill %by; copy (window of %arg1) into %by   =>     scf.yield %bx
      scf.yield %bx, %by                               } else { scf.yield (whole tile of %arg4) }
    } else {                                           %y = scf.if %partial {
      scf.yield (whole tile of %arg4), (of %arg1)        fill %by; copy (window of %arg1) into %by
    }                                                    scf.yield %by
                                                       } else { scf.yield (whole tile of %arg1) }

edge_tile_reads.py reads a tile in place only from a branch that yields that tile alone (a layer norm's
gradient loads x and dy under one mask; combined, both were copied in every program whose row is not a
whole tile). Split first, each is.

A branch is split when each op of each of its blocks serves exactly one result: the result's yielded
value, the ops writing the memory it views (fills and copies into its buffer), and what those use; and
when no result's ops read memory another's write (split, their order could change). Ops
that several results use are hoisted in front of the branch when they are pure index and view
arithmetic on values from outside it; any other shared op, or an op that serves no result, leaves the
branch as it is."""
from __future__ import annotations

from ..ir_walk import (ancestor_in_block, collect_ops, defined_outside, defining_op, inside, through_views,
                      yields)

# Pure, and defined for every operand: safe to compute whether or not the branch runs.
HOISTABLE = ("arith.constant", "arith.addi", "arith.subi", "arith.muli", "arith.minsi", "arith.maxsi",
             "arith.minui", "arith.maxui", "arith.cmpi", "arith.select", "arith.index_cast", "arith.andi",
             "arith.ori", "memref.cast", "memref.subview", "memref.reinterpret_cast")


def split_tile_branches(module) -> None:
    for branch in collect_ops(module, _candidate):
        _split(branch)


def _candidate(op) -> bool:
    from mlir import ir
    return op.name == "scf.if" and len(op.results) > 1 and len(op.regions[1].blocks) > 0 and \
        all(isinstance(r.type, ir.MemRefType) for r in op.results)


def _split(branch) -> None:
    slices = []
    for region in branch.regions:
        block = region.blocks[0]
        parts = _partition(block, branch)
        if parts is None:
            return
        slices.append(parts)
    _hoist_shared(branch, slices)
    _rebuild(branch, slices)


def _ops(block) -> list:
    return [op.operation for op in block.operations][:-1]       # the yield last


def _partition(block, branch):
    """Per result, the ops of `block` it needs (in block order), and the shared ops; None when an op
    needs hoisting that cannot be, has effects and serves no result, or writes memory of two."""
    ops = _ops(block)
    owners = {}                 # op -> set of result positions
    for position, value in enumerate(yields(block)):
        root = through_views(value)
        needed = _closure([defining_op(value)] + [op for op in ops if root in _written_roots(op)], block)
        for op in needed:
            owners.setdefault(op, set()).add(position)
    parts = [[] for _ in yields(block)]
    shared = []
    for op in ops:
        positions = owners.get(op, set())
        if len(positions) == 1:
            parts[next(iter(positions))].append(op)
        elif op.name in HOISTABLE:
            shared.append(op)   # (unused ones too: hoisting a pure op changes nothing)
        else:
            return None
    for op in shared:
        if not all(defined_outside(v, branch) or defining_op(v) in shared for v in op.operands):
            return None
    written = [set().union(*(_written_roots(op) for op in part)) for part in parts]
    for position, part in enumerate(parts):
        read = set().union(*(_read_roots(op) for op in part))
        if any(read & roots for other, roots in enumerate(written) if other != position):
            return None
    return parts, shared


def _closure(start: list, block) -> set:
    """The ops of `block` among `start` and those their operands (at any depth inside them) come from."""
    found, pending = set(), [op for op in start if op is not None]
    while pending:
        op = ancestor_in_block(pending.pop(), block)
        if op is None or op in found:
            continue
        found.add(op)
        for inner in collect_ops(op, lambda _: True):
            pending += [defining_op(v) for v in inner.operands if defining_op(v) is not None]
    return found


def _written_roots(op) -> set:
    """The memrefs under the views that `op` (or any op inside it) writes."""
    roots = set()
    for inner in collect_ops(op, lambda _: True):
        if inner.name == "memref.store":
            roots.add(through_views(inner.operands[1]))
        elif inner.name == "memref.copy":
            roots.add(through_views(inner.operands[1]))
        elif inner.name.startswith("linalg."):
            outputs = getattr(inner.opview, "outputs", None)
            roots.update(through_views(v) for v in outputs or [])
    return roots


def _read_roots(op) -> set:
    """The memrefs under the views that `op` (or any op inside it) reads."""
    roots = set()
    for inner in collect_ops(op, lambda _: True):
        if inner.name in ("memref.load", "memref.copy"):
            roots.add(through_views(inner.operands[0]))
        elif inner.name.startswith("linalg."):
            inputs = getattr(inner.opview, "inputs", None)
            roots.update(through_views(v) for v in inputs or [] if _is_memref(v))
            outputs = getattr(inner.opview, "outputs", None)      # (read too, unless overwritten whole)
            roots.update(through_views(v) for v in outputs or [] if _is_memref(v) and inner.name != "linalg.fill")
    return roots


def _is_memref(value) -> bool:
    from mlir import ir
    return isinstance(value.type, ir.MemRefType)


def _hoist_shared(branch, slices) -> None:
    for _, shared in slices:
        for op in shared:
            op.move_before(branch)


def _rebuild(branch, slices) -> None:
    """One scf.if per result, before `branch`, with the ops each needs moved into it; then `branch` goes."""
    from mlir import ir
    from mlir.dialects import scf
    (then_parts, _), (else_parts, _) = slices
    then_yields, else_yields = yields(branch.regions[0].blocks[0]), yields(branch.regions[1].blocks[0])
    for position, result in enumerate(branch.results):
        with ir.InsertionPoint(branch), branch.location:
            single = scf.IfOp(branch.operands[0], [result.type], has_else=True)
        for block, ops, value in ((single.then_block, then_parts[position], then_yields[position]),
                                  (single.else_block, else_parts[position], else_yields[position])):
            with ir.InsertionPoint(block), branch.location:
                end = scf.YieldOp([value])
            for op in ops:
                op.move_before(end)
        result.replace_all_uses_with(single.results[0])
    branch.erase()
