"""A loop's last matrix-unit product adds into the destination its accumulator is stored into whole.

`acc += tl.dot(a, b)` over k, then `tl.store(c_ptrs, acc)`: the matrix unit's emitter adds each product
into the accumulator's buffer in place (to_linalg/smt_dot.py), and the store copies that buffer into C once
the loop ends. After bufferization:

    %acc = memref.alloca() : memref<128x128xi32>
    linalg.generic outs(%acc) { linalg.yield %zero }                (or linalg.fill)
    scf.for %k = %lb to %ub step %s {
      func.call @X(%a, %b, %acc) {spine.carried_twin = "Y"}
    }
    ...                                                             (views and index arithmetic)
    linalg.copy ins(subview %acc[0, 0] [%rows, %cols] [1, 1]) outs(%dest)

An int8 1024^3 product in 128 x 128 tiles spent a tenth of its time in that copy: each program writes its
64 KiB of C in one burst, with no products left to hide the stores' cache misses. @Y is the same product
with C_out = C_in + A B written into a view of a larger matrix. Where the tile is whole (%rows and %cols the
tile's sizes) and the loop runs, the last step calls @Y, which adds the accumulator and its product into C
register block by register block, and the copy is left to edge tiles:

    %direct = %rows == 128 and %cols == 128 and %lb < %ub           (the window computed before the loop)
    %tile = memref.cast (subview %dest[0, 0] [128, 128] [1, 1])
    scf.for %k = %lb to %ub step %s {
      scf.if %direct and %k + %s >= %ub { func.call @Y(%a, %b, %acc, %tile) }
      else { func.call @X(%a, %b, %acc) }
    }
    scf.if not %direct { linalg.copy ins(subview %acc[0, 0] [%rows, %cols] [1, 1]) outs(%dest) }

Keeping the accumulator in C for the whole loop instead measured slower (0.87 against 0.96 of torch's
time at 1024^3): C's rows 4 KiB apart share an L1 set, and the register blocks load and store them at every
step.

C is then written while the last step still reads A and B. So the rewrite applies only when everything the
loop reads or writes is a local buffer or an argument the launcher has checked to overlap no memory the
kernel writes (the function's DISJOINT_ARGUMENTS: the alias-safe variant of a kernel has none and is left
as it is), only views and index arithmetic stand between the loop and the copy, and the accumulator is used
by nothing but its initialisation (an op that writes it alone), the one call directly in the loop, and the
copy after it. A call the rewrite does not take loses its twin's name.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..ir_names import CARRIED_TWIN, DISJOINT_ARGUMENTS
from ..ir_walk import (at_origin, collect_ops, defining_op, enclosing_function, erase_uncalled, inside,
                       last_input_type, offsets_sizes_strides, through_views, view_or_index, view_sizes,
                       window_at_origin, yielded)

_LOCAL_BUFFERS = ("memref.alloca", "memref.alloc")


@dataclass(frozen=True)
class _Carried:
    """An accumulator whose loop's last product can go to its destination, and the ops that use it."""
    buffer: object        # the accumulator's allocation (an ir.Value)
    loop: object          # the scf.for carrying it
    call: object          # the product added into it, directly in the loop
    window: object        # the memref.subview of it that the copy reads
    copy: object          # the linalg.copy into the destination
    order: dict           # the loop's block's ops: their places in it


def carried_products_into_destination(module) -> None:
    from mlir import ir
    calls = collect_ops(module, lambda op: op.name == "func.call" and CARRIED_TWIN in op.attributes)
    twins = {ir.StringAttr(call.attributes[CARRIED_TWIN]).value for call in calls}
    for buffer, its_calls in _by_accumulator(calls):
        carried = _carried(buffer, its_calls)
        if carried is not None:
            _into_destination(module, carried)
        else:
            for call in its_calls:
                del call.attributes[CARRIED_TWIN]
    erase_uncalled(module, twins)


def _by_accumulator(calls: list) -> list:
    """[(accumulator buffer, [calls adding into it])], in the calls' order."""
    groups = []
    for call in calls:
        buffer = call.operands[len(call.operands) - 1]
        for known, members in groups:
            if known == buffer:
                members.append(call)
                break
        else:
            groups.append((buffer, [call]))
    return groups


def _carried(buffer, calls: list) -> Optional[_Carried]:
    """The accumulator's uses when the rewrite applies (the module docstring's conditions), else None."""
    from mlir import ir
    alloc = defining_op(buffer)
    if alloc is None or alloc.name not in _LOCAL_BUFFERS or not _row_major_matrix(buffer.type):
        return None
    call, loop = calls[0], calls[0].parent
    if len(calls) != 1 or loop is None or loop.name != "scf.for" or "unsignedCmp" in loop.attributes:
        return None
    init = window = copy = None
    for use in buffer.uses:
        user = use.owner.operation
        if user == call or user.name == "memref.dealloc":
            continue
        copied = _copied_whole(user) if user.name == "memref.subview" and window is None else None
        if copied is not None:
            window, copy = user, copied
        elif init is None and _writes_alone(user, buffer):
            init = user
        else:
            return None
    if init is None or copy is None:
        return None
    order = {op: index for index, op in enumerate(loop.block.operations)}
    if not all(op.block == loop.block for op in (init, copy)) or not order[init] < order[loop] < order[copy]:
        return None
    between = list(loop.block.operations)[order[loop] + 1:order[copy]]
    if not all(view_or_index(op) for op in between):
        return None
    sizes = view_sizes(window)
    needed = [copy.operands[1]] + [size for size in sizes if not isinstance(size, int)]
    if not all(_computable_before(value, loop, order) for value in needed):
        return None
    if any(isinstance(s, int) and s != n for s, n in zip(sizes, ir.MemRefType(buffer.type).shape)):
        return None
    if not _touches_only_disjoint_memory(loop):
        return None
    return _Carried(buffer, loop, call, window, copy, order)


def _row_major_matrix(memref_type) -> bool:
    from mlir import ir
    ty = ir.MemRefType(memref_type)
    return ty.rank == 2 and ty.has_static_shape and ty.get_strides_and_offset() == ([ty.shape[1], 1], 0)


def _copied_whole(window):
    """The one linalg.copy that reads `window` (a subview at the origin with unit steps) into a matrix
    whose columns are next to each other, else None."""
    from mlir import ir
    uses = list(window.results[0].uses)
    if len(uses) != 1 or not at_origin(window) or any(s != 1 for s in offsets_sizes_strides(window)[2]):
        return None
    copy = uses[0].owner.operation
    if copy.name != "linalg.copy" or uses[0].operand_number != 0:
        return None
    destination = ir.MemRefType(copy.operands[1].type)
    return copy if destination.rank == 2 and destination.get_strides_and_offset()[0][1] == 1 else None


def _writes_alone(op, buffer) -> bool:
    """Whether `op` writes `buffer` and reads nothing: a linalg.fill of it, or a linalg.generic whose one
    operand is it as an output its body does not read."""
    operands = list(op.operands)
    if op.name == "linalg.fill":
        return operands[-1] == buffer and operands[0] != buffer
    if op.name == "linalg.generic" and operands == [buffer]:
        return not list(op.regions[0].blocks[0].arguments[0].uses)
    return False


def _computable_before(value, loop, order: dict) -> bool:
    """Whether `value` is known before `loop`: defined before it, or after it in its block by pure ops
    whose operands are."""
    op = defining_op(value)
    if op is None:
        return not inside(value.owner.owner, loop)
    if op.block != loop.block:
        return not inside(op, loop)
    if order[op] < order[loop]:
        return True
    return view_or_index(op) and all(_computable_before(v, loop, order) for v in op.operands)


def _touches_only_disjoint_memory(loop) -> bool:
    """Whether every memref an op in `loop` uses is a local buffer or a view of an argument in its
    function's DISJOINT_ARGUMENTS (through views and the branches of scf.if), and no op there reaches
    memory by other means (the LLVM dialect's pointers)."""
    from mlir import ir
    function = enclosing_function(loop)
    if function is None or DISJOINT_ARGUMENTS not in function.attributes:
        return False
    disjoint = set(ir.DenseI64ArrayAttr(function.attributes[DISJOINT_ARGUMENTS]))
    entry = function.regions[0].blocks[0]
    found_other = []

    def visit(op):
        if op.name.startswith("llvm."):
            found_other.append(op)
        for operand in op.operands:
            if isinstance(operand.type, ir.MemRefType) and not all(
                    _local_or_disjoint(root, entry, disjoint) for root in _roots(operand)):
                found_other.append(op)
        return ir.WalkResult.ADVANCE
    loop.walk(visit)
    return not found_other


def _roots(value) -> list:
    """The memrefs under `value`'s views (and base buffers), following both branches of the scf.if ops that
    yield it."""
    from mlir import ir
    value = through_views(value)
    op = defining_op(value)
    if op is not None and op.name == "memref.extract_strided_metadata":     # its base buffer
        return _roots(op.operands[0])
    if op is not None and op.name == "scf.if":
        index = ir.OpResult(value).result_number
        return [root for region in op.regions if len(region.blocks)
                for root in _roots(yielded(region.blocks[0], index))]
    return [value]


def _local_or_disjoint(root, entry, disjoint: set) -> bool:
    from mlir import ir
    op = defining_op(root)
    if op is not None:
        return op.name in _LOCAL_BUFFERS
    return root.owner == entry and ir.BlockArgument(root).arg_number in disjoint


# ------------------------------------------------------------------------------------------ rewriting

def _into_destination(module, carried: _Carried) -> None:
    from mlir import ir
    twin = ir.StringAttr(carried.call.attributes[CARRIED_TWIN]).value
    with ir.InsertionPoint(carried.loop), carried.loop.location:
        direct, tile = _destination_tile(carried, last_input_type(module, twin))
    _twin_on_last_step(carried, twin, direct, tile)
    _copy_for_edge_tiles(carried.copy, direct)


def _destination_tile(carried: _Carried, tile_type):
    """(i1: the tile is whole and the loop runs, C's tile as the twin takes it), computed here, before the
    loop: the copy's destination and window sizes, recomputed where they came after it."""
    from mlir import ir
    from mlir.dialects import arith, memref
    loop, order, shape = carried.loop, carried.order, ir.MemRefType(carried.buffer.type).shape
    known = {}
    destination = _before(carried.copy.operands[1], loop, order, known)
    direct = arith.CmpIOp(arith.CmpIPredicate.slt, loop.operands[0], loop.operands[1]).result
    for size, n in zip(view_sizes(carried.window), shape):
        if not isinstance(size, int):
            equal = arith.CmpIOp(arith.CmpIPredicate.eq, _before(size, loop, order, known),
                                 arith.ConstantOp(ir.IndexType.get(), n).result).result
            direct = arith.AndIOp(direct, equal).result
    tile = window_at_origin(destination, list(shape))
    return direct, tile if tile.type == tile_type else memref.CastOp(tile_type, tile).result


def _twin_on_last_step(carried: _Carried, twin: str, direct, tile) -> None:
    """The call becomes `scf.if direct and k + step >= upper bound { twin } else { call }`."""
    from mlir import ir
    from mlir.dialects import arith, func, scf
    call, loop = carried.call, carried.loop
    with ir.InsertionPoint(call), call.location:
        following = arith.AddIOp(loop.regions[0].blocks[0].arguments[0], loop.operands[2]).result
        last = arith.CmpIOp(arith.CmpIPredicate.sge, following, loop.operands[1]).result
        branch = scf.IfOp(arith.AndIOp(direct, last).result, has_else=True)
        with ir.InsertionPoint(branch.then_block):
            func.CallOp([], ir.FlatSymbolRefAttr.get(twin), list(call.operands) + [tile])
            scf.YieldOp([])
        with ir.InsertionPoint(branch.else_block):
            otherwise = scf.YieldOp([])
    call.move_before(otherwise)
    del call.attributes[CARRIED_TWIN]


def _copy_for_edge_tiles(copy, direct) -> None:
    """The copy after the loop runs only where the twin did not write C."""
    from mlir import ir
    from mlir.dialects import arith, scf
    with ir.InsertionPoint(copy), copy.location:
        edge = arith.XOrIOp(direct, arith.ConstantOp(ir.IntegerType.get_signless(1), 1).result).result
        branch = scf.IfOp(edge)
        with ir.InsertionPoint(branch.then_block):
            done = scf.YieldOp([])
    copy.move_before(done)


def _before(value, loop, order: dict, known: dict):
    """`value` as computed before `loop` (_computable_before holds): itself, or clones of the pure ops after
    the loop that compute it, at the current insertion point. `known`: the clones made so far, by op."""
    from mlir import ir
    op = defining_op(value)
    if op is None or op.block != loop.block or order[op] < order[loop]:
        return value
    if op not in known:
        operands = [_before(operand, loop, order, known) for operand in op.operands]
        clone = op.clone(ip=ir.InsertionPoint.current)
        for i, operand in enumerate(operands):
            clone.operands[i] = operand
        known[op] = clone
    return known[op].results[ir.OpResult(value).result_number]
