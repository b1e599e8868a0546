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

from .ir_walk import collect_ops, defining_op, offsets_sizes_strides


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
    if isinstance(tile.owner, ir.Block) or tile.owner.name != "scf.if" or not _at_origin(window):
        return None
    branch, index = tile.owner, tile.result_number
    if len(branch.regions[1].blocks) == 0:
        return None
    whole = defining_op(_yielded(branch.regions[1].blocks[0], index))
    if whole is None or whole.name != "memref.reinterpret_cast":
        return None
    then_block = branch.regions[0].blocks[0]
    buffer = _through_casts(_yielded(then_block, index))
    copies = [op for op in then_block.operations if op.name == "linalg.copy" and _window_of(op.operands[1], buffer)]
    if len(copies) != 1:
        return None
    source = defining_op(copies[0].operands[0])
    sizes = _sizes(window)
    if source is None or source.name != "memref.reinterpret_cast" or not _same_place(source, whole):
        return None
    if _sizes(source) != sizes or _sizes(defining_op(copies[0].operands[1])) != sizes:
        return None
    return source


def _window_of(value, buffer) -> bool:
    """Whether value is a subview of buffer at its origin, with unit steps."""
    op = defining_op(value)
    return op is not None and op.name == "memref.subview" and op.operands[0] == buffer and _at_origin(op)


def _at_origin(subview) -> bool:
    from mlir import ir
    return all(v == 0 for v in ir.DenseI64ArrayAttr(subview.attributes["static_offsets"])) and \
        all(v == 1 for v in ir.DenseI64ArrayAttr(subview.attributes["static_strides"]))


def _sizes(op) -> list:
    return offsets_sizes_strides(op)[1]


def _same_place(a, b) -> bool:
    """Two reinterpret_casts of one base at one offset with the same strides."""
    (a_offsets, _, a_strides), (b_offsets, _, b_strides) = offsets_sizes_strides(a), offsets_sizes_strides(b)
    return a.operands[0] == b.operands[0] and a_offsets == b_offsets and a_strides == b_strides


def _yielded(block, index: int):
    return block.operations[len(block.operations) - 1].operands[index]


def _through_casts(value):
    op = defining_op(value)
    while op is not None and op.name == "memref.cast":
        value = op.operands[0]
        op = defining_op(value)
    return value


def _erase_edge_copy(branch, index: int) -> None:
    """The then-branch's copy and fill into the buffer it yields as result `index`, once nothing reads that
    result, when they (through subviews) and the yield (through casts), all in that branch, are the
    buffer's only uses."""
    block = branch.regions[0].blocks[0]
    buffer = _through_casts(_yielded(block, index))
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
