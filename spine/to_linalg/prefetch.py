"""Prefetching the tile the next program instance will load.

The grid hands each thread chunks of consecutive program ids (cpp/grid.c), so after program x a thread
usually runs x + 1. A row-wise kernel (softmax, layer norm: one row per program) loads its row, then
computes on it from the cache, then stores: while it computes, no load is in flight, and the next
program starts by waiting on memory again. The hardware prefetchers do not bridge that gap: they stop
at every 4 KiB page and need a few misses to start again. So a load at the top of a kernel whose
address depends on the program id first asks for the tile the next program will load (its offset
computed again with program id x + 1), when the tile feeds a reduction (an elementwise kernel streams
instead, and the hardware keeps up):

    %next = arith.addi %pid_x, 1
    %row' = arith.muli %next, %stride            (the offset's own ops, cloned)
    scf.for %i = 0 to 1000 step 16 { memref.prefetch %arg[%row' + %i], read, locality<3>, data }

A prefetch never faults, so the last program's (past the end of the argument) is harmless. Only modules
marked `spine.prefetch_next_program` get them: Intel cores (targets.prefetches_next_program says why not
AMD's). Never a target without prefetch instructions: LLVM drops a prefetch the target cannot issue only
when it selects instructions, and the loop issuing it would stay.
"""
from __future__ import annotations

from typing import Optional

from mlir import ir
from mlir.dialects import arith, memref, scf

from . import index_math as im
from . import states as st
from .types import element_bytes

LINE_BYTES = 64          # a cache line of the x86 cores that prefetch here
MAX_LINES = 256          # 16 KiB: past that the hardware prefetchers have a long stream to follow
REDUCTIONS = ("tt.reduce", "tt.scan")
MAX_USES_FOLLOWED = 256


def prefetch_next_program(conv, op, ptr: st.PointerState) -> None:
    """Prefetch the tile `ptr` will be in the next program instance along x, when the target can, op is
    at the top of the kernel (a load in a loop is not at its program's start) and the tile moves with
    the program id."""
    if not conv.prefetch_next_program:
        return
    if op.operation.parent is None or op.operation.parent.name != "tt.func" or not _feeds_reduction(op):
        return
    lines = _lines_per_row(ptr)
    if lines is None:
        return
    pid = conv.program_ids[0]
    next_pid = arith.AddIOp(pid, arith.ConstantOp(pid.type, 1).result).result
    offset = _with_program_id(im.as_value(ptr.offset), pid, next_pid, {})
    if offset is None:
        return
    rows = ptr.shape[0] if len(ptr.shape) == 2 else 1
    step = LINE_BYTES // element_bytes(ptr.element_type)
    row_stride = im.as_value(ptr.strides[0]) if len(ptr.shape) == 2 else None

    def row(r):
        start = offset if row_stride is None else arith.AddIOp(offset, arith.MulIOp(r, row_stride).result).result
        line_loop = scf.ForOp(im.const(0), im.const(lines * step), im.const(step))
        with ir.InsertionPoint(line_loop.body):
            at = arith.AddIOp(start, line_loop.induction_variable).result
            memref.PrefetchOp(ptr.base, [at], False, 3, True)
            scf.YieldOp([])

    if rows == 1:
        row(None)
        return
    row_loop = scf.ForOp(im.const(0), im.const(rows), im.const(1))
    with ir.InsertionPoint(row_loop.body):
        row(row_loop.induction_variable)
        scf.YieldOp([])


def _feeds_reduction(op) -> bool:
    """Whether the loaded tile reaches a reduction or scan: then the program computes on the whole tile
    after loading it, which is the gap a prefetch fills. An elementwise kernel (a vector add) streams
    loads, arithmetic and stores through one loop instead, where the hardware prefetchers keep up and
    prefetching the next tile as well was a quarter slower."""
    pending, seen = [op.results[0]], 0
    while pending and seen < MAX_USES_FOLLOWED:
        value = pending.pop()
        for use in value.uses:
            user = use.owner
            seen += 1
            if user.name in REDUCTIONS:
                return True
            pending.extend(user.results)
    return False


def _lines_per_row(ptr: st.PointerState) -> Optional[int]:
    """Cache lines of one row of a tile whose rows are contiguous (1-D, or 2-D with unit column stride),
    or None when the tile is of another form, or too large to be worth it."""
    if len(ptr.shape) not in (1, 2) or not _is(ptr.strides[-1], 1):
        return None
    if len(ptr.shape) == 2 and _is(ptr.strides[0], 0):
        return None     # every row the same one
    row_bytes = ptr.shape[-1] * element_bytes(ptr.element_type)
    lines = -(-row_bytes // LINE_BYTES)
    rows = ptr.shape[0] if len(ptr.shape) == 2 else 1
    return lines if lines * rows <= MAX_LINES else None


def _is(index, number: int) -> bool:
    return isinstance(index, int) and index == number


def _with_program_id(value: ir.Value, pid: ir.Value, replacement: ir.Value, memo: dict) -> Optional[ir.Value]:
    """`value` computed again with `replacement` for the program id, by cloning the arith ops between
    them; None when value does not depend on the program id through arith ops alone."""
    if value == pid:
        return replacement
    if value in memo:
        return memo[value]
    owner = value.owner
    if isinstance(owner, ir.Block):
        return None
    operation = owner.operation
    if operation.regions or not operation.name.startswith("arith."):
        return None
    operands = [_with_program_id(o, pid, replacement, memo) for o in operation.operands]
    if all(o is None for o in operands):
        memo[value] = None
        return None
    clone = operation.clone()
    for i, rebuilt in enumerate(operands):
        if rebuilt is not None:
            clone.operands[i] = rebuilt
    memo[value] = clone.results[list(operation.results).index(value)]
    return memo[value]
