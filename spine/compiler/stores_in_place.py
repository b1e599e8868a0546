"""stores-in-place: a masked store's elementwise computation writes straight into the destination's window
instead of a local tile that is then copied out (see stores_in_place below)."""
from __future__ import annotations

from ..ir_walk import (all_parallel, ancestor_in_block, collect_ops, defining_op, offsets_sizes_strides, through_views,
                      window_at_origin, without_effects, yielded)


def stores_in_place(module) -> None:
    """A masked store bufferizes into: compute the tile into a local buffer, then copy its window out.

        linalg.generic ins(%a, %b) outs(%buf)              (writes every element, reads none of %buf)
        linalg.copy ins(subview %buf[0][%n]) outs(%dest)

    The generic computes just the window instead, straight into the destination, and the copy (a memcpy
    the size of the tile, a third of a vector add's time) goes:

        linalg.generic ins(subview %a[0][%n], subview %b[0][%n]) outs(%dest)

    Only elementwise generics qualify (all loops parallel, every map a projection of the loops), so each
    element is computed from inputs at its own index before it is written; and only when nothing reads
    the buffer afterwards, or only after another elementwise generic has written all of it again (tiles
    of one shape share a buffer once bufferized: a layer norm's gradient stores three of them through
    one, each copied out before the next is computed). The computation moves down to the copy: every op in between must leave its
    inputs as they were (FlagGems' GELU-and-mul gradient computed one output, then the other in place of
    a tile the first still had to read). Ops without memory effects do; a linalg op or a copy does when
    each buffer it writes is another allocation or another argument than every input's (an input behind
    an scf.if is each buffer that branches yield); anything else keeps the computation where it is."""
    for copy in collect_ops(module, lambda op: op.name == "linalg.copy"):
        match = _tile_written_then_copied(copy)
        if match is not None:
            _compute_window_into_destination(copy, *match)


def _tile_written_then_copied(copy):
    """(generic, output index, window sizes) when `copy` copies a window at 0 of a local buffer that an
    elementwise linalg.generic right before it wrote and nothing reads afterwards; else None."""
    from mlir import ir
    window = defining_op(copy.operands[0])
    if window is None or window.name != "memref.subview":
        return None
    buffer = window.operands[0]
    allocation = defining_op(buffer)
    if getattr(allocation, "name", None) not in ("memref.alloc", "memref.alloca"):
        return None
    if ir.MemRefType(buffer.type).element_type != ir.MemRefType(copy.operands[1].type).element_type:
        return None
    if any(v != 0 for v in ir.DenseI64ArrayAttr(window.attributes["static_offsets"])) or \
            any(v != 1 for v in ir.DenseI64ArrayAttr(window.attributes["static_strides"])):
        return None
    if ir.MemRefType(window.results[0].type).rank != ir.MemRefType(buffer.type).rank:
        return None     # a column of a tile, read as a vector: not the tile's computation over a window
    sizes = offsets_sizes_strides(window)[1]
    writer, between = copy, []      # between: the ops after the writer, before the copy
    while True:
        writer = _previous_op(writer)
        if writer is None:
            return None
        if writer != window and any(operand == buffer for operand in writer.operands):
            break
        between.append(writer)
    if writer.name != "linalg.generic" or writer.block != allocation.block:
        return None     # (a buffer defined outside a loop may be read again in the next iteration)
    generic = writer.opview
    if not all_parallel(generic):
        return None
    outputs = list(generic.outputs)
    if outputs != [buffer]:     # another output would be computed over the window only
        return None
    index = outputs.index(buffer)
    body = generic.regions[0].blocks[0]
    if list(body.arguments[len(generic.inputs) + index].uses):
        return None
    maps = [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(generic.attributes["indexing_maps"])]
    if not all(m.is_projected_permutation for m in maps) or \
            str(maps[len(generic.inputs) + index]) != str(ir.AffineMap.get_identity(len(sizes))):
        return None
    rewrite = _next_full_write(buffer, copy)
    for use in buffer.uses:
        user = ancestor_in_block(use.owner.operation, writer.block)
        if user is None or not (user == writer or user == window or user.is_before_in_block(writer) or
                                (rewrite is not None and not user.is_before_in_block(rewrite))):
            return None
    for use in window.results[0].uses:      # the window may be copied out again after the rewrite
        user = ancestor_in_block(use.owner.operation, writer.block)
        if user is None or not (user == copy or user.is_before_in_block(writer) or
                                (rewrite is not None and not user.is_before_in_block(rewrite))):
            return None
    if not _inputs_kept(generic, between):
        return None
    return generic, index, sizes


def _overwrites(op, buffer) -> bool:
    """Whether `op` is an elementwise linalg.generic that writes every element of `buffer` (its only
    output, by the identity map) and reads none of it."""
    from mlir import ir
    if op.name != "linalg.generic":
        return False
    generic = op.opview
    if list(generic.outputs) != [buffer] or any(operand == buffer for operand in generic.inputs):
        return False
    if not all_parallel(generic):
        return False
    out_map = ir.AffineMapAttr(ir.ArrayAttr(generic.attributes["indexing_maps"])[len(generic.inputs)]).value
    ranked = ir.MemRefType(buffer.type)
    return str(out_map) == str(ir.AffineMap.get_identity(ranked.rank)) and \
        not list(generic.regions[0].blocks[0].arguments[len(generic.inputs)].uses)


def _next_full_write(buffer, copy):
    """The first op after `copy` in its block that touches `buffer`, when that op overwrites all of it
    (_overwrites); else None."""
    first = None
    for use in buffer.uses:
        user = ancestor_in_block(use.owner.operation, copy.block)
        if user is not None and copy.operation.is_before_in_block(user) and \
                (first is None or user.is_before_in_block(first)):
            first = user
    return first if first is not None and _overwrites(first, buffer) else None


def _roots(value) -> set | None:
    """The allocations and block arguments `value` may be a view of (through views, selects and scf.if
    results); None when that is not known."""
    value = through_views(value)
    op = defining_op(value)
    if op is None or op.name in ("memref.alloc", "memref.alloca"):
        return {value}
    if op.name == "arith.select":       # either buffer, chosen at run time
        roots = [_roots(v) for v in op.operands[1:]]
        return None if None in roots else roots[0] | roots[1]
    if op.name == "scf.if":
        position = next(i for i, result in enumerate(op.results) if result == value)
        roots = set()
        for region in op.regions:
            if not len(region.blocks):
                return None
            branch = _roots(yielded(region.blocks[0], position))
            if branch is None:
                return None
            roots |= branch
        return roots
    return None


def _written(op) -> list | None:
    """The memrefs `op` writes: a linalg op's outputs, a memref.copy's target, none for ops without memory
    effects; None for other ops that touch memory (calls, loops, stores)."""
    from mlir import ir
    if without_effects(op):
        return []
    if op.name == "memref.copy":
        return [op.operands[1]]
    outputs = getattr(op.opview, "outputs", None) if op.name.startswith("linalg.") else None
    if outputs is None:
        return None
    return [v for v in outputs if isinstance(v.type, ir.MemRefType)]


def _inputs_kept(generic, between: list) -> bool:
    """Whether every op of `between` (those after the generic, before the copy) leaves the generic's
    inputs as they are."""
    from mlir import ir
    inputs = set()
    for operand in generic.inputs:
        if isinstance(operand.type, ir.MemRefType):
            roots = _roots(operand)
            if roots is None:
                return False
            inputs |= roots
    for op in between:
        written = _written(op)
        if written is None:
            return False
        for target in written:
            roots = _roots(target)
            if roots is None or roots & inputs:
                return False
    return True


def _previous_op(op):
    previous = None
    for candidate in op.block.operations:
        if candidate.operation == op:
            return previous
        previous = candidate.operation
    return None


def _compute_window_into_destination(copy, generic, index, sizes) -> None:
    from mlir import ir
    maps = [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(generic.attributes["indexing_maps"])]
    operands = list(generic.inputs) + list(generic.outputs)
    output = len(generic.inputs) + index
    with ir.InsertionPoint(copy), copy.location:
        windows = []
        for i, (operand, affine_map) in enumerate(zip(operands, maps)):
            if i == output:
                windows.append(copy.operands[1])
            elif isinstance(operand.type, ir.MemRefType) and len(affine_map.results):
                dims = [ir.AffineDimExpr(r).position for r in affine_map.results]
                windows.append(window_at_origin(operand, [sizes[d] for d in dims]))
            else:
                windows.append(operand)
        windowed = generic.operation.clone(ip=ir.InsertionPoint(copy))
        for i, value in enumerate(windows):
            windowed.operands[i] = value
    generic.operation.erase()
    copy.erase()
