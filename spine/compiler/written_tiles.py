"""A masked tile copied from an argument the kernel writes is read like one it never writes, where nothing
writes memory between the copy and the tile's last read.

to_linalg/load.py reads tiles of arguments the kernel never writes in place, and copies only edge tiles
(the `scf.if` that edge_tile_reads.py and window_reads.py take apart). An argument the kernel also writes
(or one that may overlap such an argument) is always copied, since a store could change it before the
tile is used. Triton's layer-norm backward reads its partial sums that way, under a lock, adds to them
and stores them back: two row copies and fills a program, through the C library's memmove and memset.

When every op from the copy to the last read of the tile, in the copy's block, writes only local buffers
(tiles on the stack), the argument holds the same values at each read as at the copy, and the copy
becomes the edge-tile branch:

    scf.if %partial {                              %tile = scf.if %partial -> memref<1024xf16, strided<[1], offset: ?>> {
      linalg.fill ins(%other) outs(subview %buf[%n] [1024 - %n])    (the same fill, window and copy)
    }                                                 scf.yield (memref.cast %buf)
    %w = reinterpret_cast %arg to offset: [%o],  =>  } else {
             sizes: [%n], strides: [1]                 scf.yield reinterpret_cast %arg to offset: [%o], sizes: [1024], strides: [1]
    linalg.copy ins(%w) outs(subview %buf[0] [%n])   }
    linalg.generic ins(%buf, ..) outs(%local)      linalg.generic ins(%tile, ..) outs(%local)

(%partial is `%n != 1024`: the else branch runs when the window is the whole tile.) Both branches take the
window's strides, but the buffer's along a dimension of one element (a one-element load's window has
stride 0 there, which no memref.cast of the buffer reaches); a window whose static stride differs from the
buffer's along a longer dimension keeps its copy. The passes after it
then read the whole tile in place and the edge tile's window from the argument. The tile may be read
directly or through views at its origin (a masked store's window, stores_in_place.py), and its last reader
may write the tile's own window of the argument, elementwise, indexed as it reads the tile (`acc += x`
stored back: each element is read before the same iteration writes it). Tiles read anywhere else, or with
a write to other memory that is not a local buffer (any argument: arguments may overlap), a call or an
atomic between the copy and a read, keep their copy. riscv64 guest instructions of that `acc += 2 x`, 16
rows of 1,000 fp32 in tiles of 1,024: 20,016 -> 10,528.
"""
from __future__ import annotations

from typing import Optional

from ..ir_walk import (accessed, at_origin, collect_ops, defining_op, inside, offsets_sizes_strides,
                      same_place, through_casts, through_views, view_sizes, window_at_origin, without_effects)
from .edge_tile_reads import dimensions_tested

_LOCAL = ("memref.alloca", "memref.alloc")


def read_written_tiles_as_edge_tiles(module) -> Optional[str]:
    """The rewrite on every such copy of `module`; returns what it kept, if anything."""
    kept, candidates = [], 0
    for copy in collect_ops(module, lambda op: op.name == "linalg.copy"):
        found = _recognise(copy)
        if found is None:
            continue
        candidates += 1
        if isinstance(found, str):
            kept.append(found)
        else:
            _rewrite(copy, *found)
    if not kept:
        return None
    return f"kept {len(kept)} of {candidates} copies of edge tiles of written arguments (first: {kept[0]})"


# ------------------------------------------------------------------------------------------ recognising

def _recognise(copy):
    """(the fill's branch, the buffer, the readers of the buffer, the views they read through, the whole
    tile's strides: _whole_strides) when `copy` copies a window of an argument into an edge tile as above
    and nothing writes memory before the last reader; why not, when it is such a copy otherwise; None when
    it is not."""
    window, destination = defining_op(copy.operands[0]), defining_op(copy.operands[1])
    if window is None or window.name != "memref.reinterpret_cast" or _local(window.operands[0]):
        return None
    if destination is None or destination.name != "memref.subview" or not at_origin(destination):
        return None
    buffer = through_casts(destination.operands[0])
    owner = defining_op(buffer)
    if owner is None or owner.name not in _LOCAL or destination.operands[0] != buffer:
        return None
    if _element(window.results[0]) != _element(buffer):       # a copy that converts reads converted values
        return None
    sizes, shape = view_sizes(window), _shape(buffer)
    if view_sizes(destination) != sizes or len(sizes) != len(shape):
        return None
    fill = _fill_branch(copy, buffer, sizes, shape)
    if fill is None:
        return None
    strides = _whole_strides(window, buffer)
    if strides is None:
        return "the window's stride is not the tile's"
    uses = _uses(copy, buffer, fill, destination)
    if not uses or not uses[0]:
        return "the tile is used other than by local computations after the copy"
    readers, views = uses
    written = _first_write_until(copy, readers, {buffer} | {v.results[0] for v in views}, window)
    if written is not None:
        return f"{written} may write the argument before the tile's last read"
    return fill, buffer, readers, views, strides


def _shape(buffer) -> list:
    from mlir import ir
    return list(ir.MemRefType(buffer.type).shape)


def _element(memref):
    from mlir import ir
    return ir.MemRefType(memref.type).element_type


def _local(memref) -> bool:
    owner = defining_op(through_views(memref))
    return owner is not None and owner.name in _LOCAL + ("memref.get_global",)


def _fill_branch(copy, buffer, sizes, shape):
    """The scf.if before `copy` in its block that fills the rest of `buffer` when the window is partial:
    its condition an `or` of `n_d != full_d` for each dynamic size, its body fills of subviews of buffer
    with one value and index arithmetic; None when there is none such."""
    ops = [o.operation for o in copy.block.operations]
    for op in reversed(ops[:ops.index(copy)]):
        if op.name != "scf.if":
            continue
        if len(op.results) or len(op.regions[1].blocks) or not _fills_only(op, buffer):
            return None
        return op if _condition_covers(op.operands[0], sizes, shape) else None
    return None


def _fills_only(branch, buffer) -> bool:
    values = set()
    for op in branch.regions[0].blocks[0].operations:
        op = op.operation
        if op.name == "linalg.fill":
            target = defining_op(op.operands[1])
            if target is None or target.name != "memref.subview" or target.operands[0] != buffer:
                return False
            values.add(op.operands[0])
        elif not (without_effects(op) or op.name == "scf.yield"):
            return False
    return len(values) == 1


def _condition_covers(condition, sizes, shape) -> bool:
    """Whether `condition` holds whenever some size differs from the buffer's (an `or` of `!=`)."""
    tested = dimensions_tested(condition, sizes, shape)
    return all(d in tested or n == full for d, (n, full) in enumerate(zip(sizes, shape)))


def _uses(copy, buffer, fill, destination) -> Optional[tuple]:
    """(the operations that read `buffer`, in order; the views of it at its origin they read through), all
    after `copy` in its block: linalg ops taking it as an input, loads; None when something else uses it."""
    ops = [o.operation for o in copy.block.operations]
    after = ops[ops.index(copy) + 1:]
    readers, views = [], []
    for use in buffer.uses:
        user = use.owner
        if user == destination or (user.name == "memref.subview" and inside(user, fill)):
            continue
        if user.name == "memref.subview" and at_origin(user) and user in after and _keeps_rank(user):
            inner = list(user.results[0].uses)
            if not all(_reads(u) and u.owner in after for u in inner):
                return None
            readers += [u.owner for u in inner]
            views.append(user)
        elif _reads(use) and user in after:
            readers.append(user)
        else:
            return None
    unique = []
    for op in sorted(readers, key=after.index):
        if op not in unique:
            unique.append(op)
    return unique, views


def _keeps_rank(view) -> bool:
    """A view of as many dimensions as its source (rebuilt on the branch's result by window_at_origin)."""
    from mlir import ir
    return ir.MemRefType(view.results[0].type).rank == ir.MemRefType(view.operands[0].type).rank


def _reads(use) -> bool:
    user = use.owner
    return (user.name == "memref.load" and use.operand_number == 0) or \
        (user.name.startswith("linalg.") and use.operand_number < _inputs_of(user))


def _inputs_of(linalg_op) -> int:
    """How many of a linalg op's operands are inputs (the rest are its outputs)."""
    return len(linalg_op.opview.inputs)


def _first_write_until(copy, readers: list, tile: set, window) -> Optional[str]:
    """The name of the first op after `copy` up to the last reader (in one block) that may write memory
    other than local buffers, or None. The last reader may also write the tile's own window of the
    argument, element by element where it reads it (see _writes_own_window)."""
    ops = [o.operation for o in copy.block.operations]
    for op in ops[ops.index(copy) + 1:ops.index(readers[-1]) + 1]:
        if not (_writes_only_local(op) or (op == readers[-1] and _writes_own_window(op, tile, window))):
            return op.name
    return None


def _writes_own_window(op, tile: set, window) -> bool:
    """Whether `op` is an elementwise linalg.generic whose outputs are local or the argument's window the
    tile was copied from (the same place), each indexed like its reads of the tile (`tile`: the buffer and
    its views), by a permutation: each element is read before the same iteration writes it, and no other
    iteration writes it."""
    from mlir import ir
    if op.name != "linalg.generic" or "reduction" in str(op.attributes["iterator_types"]) or not _body_pure(op):
        return False
    maps = [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(op.attributes["indexing_maps"])]
    operands = list(op.operands)
    read_maps = {str(maps[i]) for i in range(_inputs_of(op)) if operands[i] in tile}
    for i in range(_inputs_of(op), len(operands)):
        if _local(operands[i]):
            continue
        written = defining_op(operands[i])
        if written is None or written.name != "memref.reinterpret_cast" or not same_place(written, window):
            return False
        if not maps[i].is_permutation or read_maps != {str(maps[i])}:
            return False
    return True


def _writes_only_local(op) -> bool:
    if without_effects(op) or op.name in _LOCAL + ("memref.load", "scf.yield", "linalg.yield"):
        return True
    if op.name == "memref.store":
        return _local(accessed(op)[0])
    if op.name.startswith("linalg."):
        return all(_local(v) for v in list(op.operands)[_inputs_of(op):]) and _body_pure(op)
    if op.name in ("scf.if", "scf.for"):
        return all(_writes_only_local(inner) for inner in collect_ops(op, lambda o: o != op))
    return False


def _body_pure(linalg_op) -> bool:
    return all(without_effects(o) or o.name in ("linalg.yield", "linalg.index")
               for o in collect_ops(linalg_op, lambda o: o != linalg_op))


# ------------------------------------------------------------------------------------------ rewriting

def _rewrite(copy, fill, buffer, readers, views, strides) -> None:
    from mlir import ir
    from mlir.dialects import memref, scf
    window, destination = defining_op(copy.operands[0]), defining_op(copy.operands[1])
    shape = _shape(buffer)
    whole_type = _whole_type(window, shape, strides)
    with ir.InsertionPoint(copy), copy.location:
        branch = scf.IfOp(fill.operands[0], [whole_type], has_else=True)
    with ir.InsertionPoint(branch.then_block), copy.location:
        tile = memref.CastOp(whole_type, buffer)
        scf.YieldOp([tile.result])
    with ir.InsertionPoint(branch.else_block), copy.location:
        scf.YieldOp([_whole(window, shape, strides, whole_type)])
    end = tile.operation
    fill.move_before(end)
    copy.operands[0] = _moved_or_cloned(window, end)
    copy.operands[1] = _moved_or_cloned(destination, end)
    copy.move_before(end)
    for reader in readers:
        for i, operand in enumerate(reader.operands):
            if operand == buffer:
                reader.operands[i] = branch.results[0]
    for view in views:
        with ir.InsertionPoint(view), view.location:
            view.results[0].replace_all_uses_with(window_at_origin(branch.results[0], view_sizes(view)))
        view.erase()


def _whole_strides(window, buffer) -> Optional[list]:
    """The strides both branches' tiles take: the window's (a number, or its SSA value where dynamic), but
    the buffer's where the tile has one element along a dimension (any stride reaches the same element, and
    memref.cast needs static strides equal: a one-element load's window has stride 0 there); None when a
    static stride of the window differs from the buffer's along a longer dimension (no cast joins them)."""
    from mlir import ir
    buffer_type = ir.MemRefType(buffer.type)
    tile_strides, _ = buffer_type.get_strides_and_offset()
    dynamic = ir.ShapedType.get_dynamic_stride_or_offset()
    strides = []
    for n, stride, tile_stride in zip(buffer_type.shape, offsets_sizes_strides(window)[2], tile_strides):
        if n == 1 and tile_stride != dynamic:
            strides.append(tile_stride)
        elif isinstance(stride, int) and tile_stride != dynamic and stride != tile_stride:
            return None
        else:
            strides.append(stride)
    return strides


def _whole_type(window, shape, strides):
    """The type of the window's cast widened to the whole tile: static sizes, its offset, `strides`."""
    from mlir import ir
    window_type = ir.MemRefType(window.results[0].type)
    _, offset = window_type.get_strides_and_offset()
    dynamic = ir.ShapedType.get_dynamic_stride_or_offset()
    layout = ir.StridedLayoutAttr.get(offset, [s if isinstance(s, int) else dynamic for s in strides])
    return ir.MemRefType.get(shape, window_type.element_type, layout)


def _whole(window, shape, strides, whole_type):
    """`window` with the tile's sizes and `strides`: the argument's elements the whole tile covers."""
    from mlir import ir
    from mlir.dialects import memref
    offsets = offsets_sizes_strides(window)[0]
    dynamic = ir.ShapedType.get_dynamic_stride_or_offset()
    return memref.ReinterpretCastOp(
        whole_type, window.operands[0], [v for v in offsets if not isinstance(v, int)], [],
        [v for v in strides if not isinstance(v, int)],
        [v if isinstance(v, int) else dynamic for v in offsets], shape,
        [v if isinstance(v, int) else dynamic for v in strides]).result


def _moved_or_cloned(view, before):
    """`view` (the copy's source or destination) placed before `before`: moved when the copy is its only
    user, else cloned, so that its other users keep theirs."""
    from mlir import ir
    if len(list(view.results[0].uses)) == 1:
        view.move_before(before)
        return view.results[0]
    return view.clone(ip=ir.InsertionPoint(before)).results[0]
