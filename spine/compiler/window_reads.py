"""Reads of the unmasked window of an edge tile go to the argument it was copied from.

A masked tl.load from an argument the kernel never writes reads whole tiles in place and copies only the
edge tiles, whose masked-off lanes need the `other` value (to_linalg/load.py). After bufferization:

    %tile = scf.if %partial -> memref<1024xf32, ...> {
      linalg.fill ins(%other) outs(subview %buf[%n] [1024 - %n])
      linalg.copy ins(reinterpret_cast %arg to offset: [%o], sizes: [%n], strides: [1])
                  outs(subview %buf[0] [%n])
      scf.yield %buf
    } else {
      scf.yield reinterpret_cast %arg to offset: [%o], sizes: [1024], strides: [1]
    }
    %w = memref.subview %tile[0] [%n] [1]          (a masked store computes only its window: lower.py)

Either way %w holds the argument's elements: it becomes `reinterpret_cast %arg to offset: [%o],
sizes: [%n], strides: [1]`. When nothing else reads %tile, the copy and the fill are erased: a layer
norm's weight and bias were copied, and their padding filled, in every program, through two C library
calls each (and the vector registers they spill).
"""
from __future__ import annotations

from ..ir_walk import at_origin, collect_ops, defining_op, same_place, through_casts, view_sizes, yielded


def read_windows_in_place(module) -> None:
    from mlir import ir
    for window in collect_ops(module, lambda op: op.name == "memref.subview"):
        source = _source_of_window(window)
        if source is None:
            continue
        clone = source.clone(ip=ir.InsertionPoint(window))
        if clone.results[0].type != window.results[0].type:
            clone.erase()
            continue
        tile = window.operands[0]
        branch, index = tile.owner, tile.result_number
        window.results[0].replace_all_uses_with(clone.results[0])
        window.erase()
        if not list(branch.results[index].uses):
            _erase_edge_copy(branch, index)


def _source_of_window(window):
    """The reinterpret_cast of the argument that `window` (a subview at 0 with unit steps of an scf.if
    result) equals in both branches, or None."""
    from mlir import ir
    tile = window.operands[0]
    if isinstance(tile.owner, ir.Block) or tile.owner.name != "scf.if" or not at_origin(window):
        return None
    branch, index = tile.owner, tile.result_number
    if len(branch.regions[1].blocks) == 0:
        return None
    whole = defining_op(yielded(branch.regions[1].blocks[0], index))
    if whole is None or whole.name != "memref.reinterpret_cast":
        return None
    then_block = branch.regions[0].blocks[0]
    buffer = through_casts(yielded(then_block, index))
    copies = [op for op in then_block.operations if op.name == "linalg.copy" and _window_of(op.operands[1], buffer)]
    if len(copies) != 1:
        return None
    source = defining_op(copies[0].operands[0])
    sizes = view_sizes(window)
    if source is None or source.name != "memref.reinterpret_cast" or not same_place(source, whole):
        return None
    if view_sizes(source) != sizes or view_sizes(defining_op(copies[0].operands[1])) != sizes:
        return None
    return source


def _window_of(value, buffer) -> bool:
    """Whether value is a subview of buffer at its origin, with unit steps."""
    op = defining_op(value)
    return op is not None and op.name == "memref.subview" and op.operands[0] == buffer and at_origin(op)


def _erase_edge_copy(branch, index: int) -> None:
    """The then-branch's copy and fill into the buffer it yields as result `index`, once nothing reads that
    result, when they (through subviews) and the yield (through casts), all in that branch, are the
    buffer's only uses."""
    block = branch.regions[0].blocks[0]
    buffer = through_casts(yielded(block, index))
    writers = []
    for use in buffer.uses:
        user = use.owner
        if user.operation.block != block:
            return          # (another branch's tile in the same buffer)
        if user.name == "memref.cast":
            if any(u.owner.name != "scf.yield" for u in user.results[0].uses):
                return
        elif user.name == "memref.subview":
            for u in user.results[0].uses:
                if u.owner.name not in ("linalg.copy", "linalg.fill") or u.owner.operands[-1] != user.results[0]:
                    return
                writers.append(u.owner)
            writers.append(user)
        elif user.name != "scf.yield":
            return
    for op in writers:
        op.erase()
