"""smt barriers and thread count: the reserved calls of spine/language/smt/threads.py become calls of
Spine's runtime (cpp/parallel_loops.c), which the kernel .so binds to when it is loaded.

    %b = tt.call @"spine.language.smt.threads.mbarrier__i32"(%n) : (i32) -> i64
  becomes
    %buf = memref.alloca() : memref<8xi64>             (in the entry block: the barrier's state)
    %b   = index_cast (memref.extract_aligned_pointer_as_index %buf) to i64
    func.call @spine_smt_barrier_init(%b, %n)

mbarrier_copies(%n, %copies), with %copies a constant c, is the same with one memref<(8 c)xi64> and c
calls of @spine_smt_barrier_init, at %b, %b + 64, ... (BARRIER_BYTES apart);
barrier_arrive / barrier_wait / barrier_set_expect call spine_smt_barrier_<kind>(%b[, %n]);
num_threads calls spine_smt_num_threads(num_programs x * y * z). A barrier lives in the program's stack
frame, which outlives the parallel loops that use it (their threads run while the program waits).
"""
from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, memref

from ..ir_walk import constant_int
from .smt_calls import callee, lowers, reserved_kind

BARRIER_WORDS = 8    # i64 words of one barrier's state: spine/language/smt/threads.py's BARRIER_BYTES

I32 = lambda: ir.IntegerType.get_signless(32)   # noqa: E731
I64 = lambda: ir.IntegerType.get_signless(64)   # noqa: E731


def _barriers(conv, expected, copies: int):
    """The handle of the first of `copies` fresh barriers expecting `expected` arrivals."""
    with ir.InsertionPoint.at_block_begin(conv.entry_block):
        state = memref.AllocaOp(ir.MemRefType.get([BARRIER_WORDS * copies], I64()), [], [], alignment=64).result
    address = memref.ExtractAlignedPointerAsIndexOp(state).result
    first = arith.IndexCastOp(I64(), address).result
    for i in range(copies):
        handle = first
        if i:
            offset = arith.ConstantOp(I64(), ir.IntegerAttr.get(I64(), BARRIER_WORDS * 8 * i)).result
            handle = arith.AddIOp(first, offset).result
        conv.call("spine_smt_barrier_init", [handle, expected], [])
    return first


@lowers("mbarrier")
def convert_mbarrier(conv, op):
    conv.bind(op.results[0], _barriers(conv, conv.concrete(op.operands[0]), 1))


@lowers("mbarrier_copies")
def convert_mbarrier_copies(conv, op):
    copies = constant_int(op.operands[1])
    if copies is None:
        raise conv.unsupported(op, "smt.mbarrier_copies needs a constant number of copies")
    conv.bind(op.results[0], _barriers(conv, conv.concrete(op.operands[0]), copies))


@lowers("barrier_arrive", "barrier_wait")
def convert_arrive_or_wait(conv, op):
    kind = reserved_kind(callee(op))
    conv.call(f"spine_smt_{kind}", [conv.concrete(op.operands[0])], [])


@lowers("barrier_set_expect")
def convert_set_expect(conv, op):
    conv.call("spine_smt_barrier_set_expect", [conv.concrete(v) for v in op.operands], [])


@lowers("num_threads")
def convert_num_threads(conv, op):
    nx, ny, nz = conv.program_ids[3:6]
    programs = arith.MulIOp(arith.MulIOp(nx, ny).result, nz).result
    conv.bind(op.results[0], conv.call("spine_smt_num_threads", [programs], [I32()])[0])
