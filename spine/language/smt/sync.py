"""`smt.parallel` and what synchronises its iterations: mbarriers, `get_num_of_thread`, `compile_hint`.

An `smt.parallel(start, end[, step])` loop's iterations run concurrently on a team of threads of the
program (spine-triton's sub-block model). Its TTIR is the loop `tl.range` gives, marked as parallel
(parallel_loop.py); the lowering runs it through MLIR's OpenMP dialect on Spine's runtime
(compiler/parallel_loops.py, cpp/parallel_loops.c). `bind_sub_block` is accepted and changes nothing.

Team size. The grid already spreads programs over every core (the `SPINE_NUM_THREADS` limit, else all of
them). When a launch has at least as many programs as cores, a program's parallel loops run in order on
its own thread; with fewer, each loop runs on cores // programs threads (the program's own and idle
helpers), at most one per iteration. A parallel loop inside another's iterations, and a loop that carries
values from one iteration to the next (`acc += ...` over the loop), run in order. Iterations are split
into one contiguous block per thread, each thread running its block in increasing order.

`get_num_of_thread()` is a runtime value: inside the iterations of a loop running on a team, that team's
size; anywhere else, the size this program's parallel loops get, cores // programs (at least 1). A loop
with fewer iterations than that uses fewer threads.

Barriers. `mbarrier(expect_count=n)` makes a barrier (an int64 handle; its state lives in the program's
stack frame) that counts arrivals. `barrier_arrive(bar)` adds one; `barrier_wait(bar)` returns once the
arrivals reach the barrier's expected count, which `barrier_set_expect(bar, n)` changes. A barrier
completes once: later waits return at once. `mbarrier`'s `flag`, `arrive_count` and `transaction_count`
and `barrier_wait`'s `flag` and `arrive_count` are accepted and ignored. Arrivals are release operations
and waits acquire ones: what an iteration stored before arriving is visible after the wait.

Since each thread runs its iterations in increasing order, a wait for arrivals made by earlier iterations
(spine-triton's SPLIT_MN matmul: the first row of sub-blocks stages B and arrives, the others wait) always
completes, on any team size. A wait whose arrivals can never come (every thread of the team is waiting
or done, or the loop runs in order and the arrival belongs to a later iteration) does not hang: it is
reported as an assertion failure, which the launch raises, and the wait returns.

`mbarrier_copies(copies=n, ...)` makes n such barriers at once, each expecting `expect_count`; `bars[i]`
is the i-th one's handle, for a constant i (checked against n) or a runtime one (which must be in
[0, n): it is not checked). `global_mbarrier(id)`, a barrier shared by every program of a launch, is
refused with an error, as spine-triton's own lowering refuses it: the programs of a grid are not all
running at once (more programs than cores run one after another), so a wait for another program's
arrival could wait for a program that only starts once the waiting one has finished.
"""
from __future__ import annotations

from triton.language import core as tl

from . import threads
from .checks import check
from .parallel_loop import install


class parallel(tl.range):
    """`for s in smt.parallel(start, end[, step])`: iterations that may run concurrently on several
    threads of the program (see the module docstring)."""
    __spine_smt_parallel__ = True     # what parallel_loop.py recognises (its MARK)

    def __init__(self, arg1, arg2=None, step=None, num_stages=None, loop_unroll_factor=None,
                 bind_sub_block=False):
        super().__init__(arg1, arg2, step, num_stages, loop_unroll_factor)
        self.bind_sub_block = bind_sub_block


install()


def _int32(value, name: str, _semantic) -> tl.tensor:
    value = tl._unwrap_if_constexpr(value)
    check(isinstance(value, (int, tl.tensor)), f"{name} must be an integer")
    return _semantic.cast(_semantic.to_tensor(value), tl.int32)


def mbarrier(flag, arrive_count, transaction_count, expect_count, _semantic, _generator) -> tl.tensor:
    for name, value in (("flag", flag), ("arrive_count", arrive_count), ("transaction_count", transaction_count)):
        check(isinstance(tl._unwrap_if_constexpr(value), (int, tl.tensor)), f"mbarrier {name} must be an integer")
    expected = _int32(expect_count, "mbarrier expect_count", _semantic)
    return _generator.call_JitFunction(threads.mbarrier, [expected], {})


MAX_BARRIER_COPIES = 1024    # each copy is initialised by its own call in the kernel's entry


class barrier_copies_type(tl.dtype):
    """The int64 handle of the first of `copies` barriers (the frontend rebuilds values from their type
    entering a loop or a branch, so the count lives here)."""

    def __init__(self, copies: int):
        super().__init__("int64")
        self.copies = copies

    def _unflatten_ir(self, handles, cursor):
        return barrier_copies(handles[cursor], self), cursor + 1


class barrier_copies(tl.tensor):
    """`bars[i]`: the handle of the i-th barrier."""

    def __getitem__(self, index, _semantic=None):
        index = tl._unwrap_if_constexpr(index)
        copies = self.type.copies
        if isinstance(index, int):
            check(0 <= index < copies, f"barrier index {index} out of range [0, {copies})")
        first = tl.tensor(self.handle, tl.int64)
        offset = _semantic.mul(_semantic.cast(_semantic.to_tensor(index), tl.int64), threads.BARRIER_BYTES, True)
        return _semantic.add(first, offset, True)


def mbarrier_copies(flag, arrive_count, transaction_count, expect_count, copies, _semantic, _generator):
    for name, value in (("flag", flag), ("arrive_count", arrive_count), ("transaction_count", transaction_count)):
        check(isinstance(tl._unwrap_if_constexpr(value), (int, tl.tensor)),
              f"mbarrier_copies {name} must be an integer")
    copies = tl._unwrap_if_constexpr(copies)
    check(isinstance(copies, int) and not isinstance(copies, bool) and 1 <= copies <= MAX_BARRIER_COPIES,
          f"mbarrier_copies copies must be a constant integer in [1, {MAX_BARRIER_COPIES}], got {copies}")
    expected = _int32(expect_count, "mbarrier_copies expect_count", _semantic)
    first = _generator.call_JitFunction(threads.mbarrier_copies, [expected, _int32(copies, "copies", _semantic)], {})
    return barrier_copies(first.handle, barrier_copies_type(copies))


def global_mbarrier(id) -> None:
    check(False, "smt.global_mbarrier is not supported: a barrier shared by the programs of a launch could wait "
                 "for a program that has not started (more programs than cores run one after another). "
                 "Synchronise the iterations of an smt.parallel loop with smt.mbarrier instead, or split the "
                 "work into two launches")


def check_barrier(bar) -> None:
    check(isinstance(bar, tl.tensor) and bar.dtype == tl.int64 and not bar.type.is_block(),
          "expected a barrier made by smt.mbarrier")


def barrier_arrive(bar, _generator) -> None:
    check_barrier(bar)
    _generator.call_JitFunction(threads.barrier_arrive, [bar], {})


def barrier_wait(bar, _generator) -> None:
    check_barrier(bar)
    _generator.call_JitFunction(threads.barrier_wait, [bar], {})


def barrier_set_expect(bar, expect_count, _semantic, _generator) -> None:
    check_barrier(bar)
    _generator.call_JitFunction(threads.barrier_set_expect,
                                [bar, _int32(expect_count, "barrier_set_expect count", _semantic)], {})


def get_num_of_thread(_generator) -> tl.tensor:
    return _generator.call_JitFunction(threads.num_threads, [], {})


def compile_hint(ptr, hint_name, hint_val) -> None:
    """Hints name optimisations of spine-triton's compiler; Spine has none of them, and ignores hints."""
    check(isinstance(tl._unwrap_if_constexpr(hint_name), str), f"hint name must be a string, got {hint_name}")
    value = tl._unwrap_if_constexpr(hint_val)
    check(value is None or isinstance(value, (bool, int)), f"hint value must be a bool or an int, got {value}")
