"""`smt.parallel` and what synchronises its iterations: mbarriers, `get_num_of_thread`, `compile_hint`.

Iterations of an `smt.parallel` loop run one after another, in order, on the program's own thread. That is
a correct way to run them: a parallel loop's iterations may run concurrently, so none may depend on running
at the same time as another. The grid already spreads programs over every core.

Why not threads: triton's frontend builds a `for` loop only from its own `range` class (it checks the
class's identity, so no subclass can add a marker), hence `smt.parallel` *is* `tl.range` and its loop is
indistinguishable from any other in TTIR. Consequently `parallel` takes `tl.range`'s arguments and not
spine-triton's `bind_sub_block` (which spine-triton itself now defaults to False, a sequential loop).

With iterations in order, every `barrier_arrive` of an earlier iteration has happened when a later
iteration reaches `barrier_wait`: waits never block, and barriers compile to nothing. (A wait for an
arrival by a *later* iteration, which a concurrent schedule might satisfy, does not block either; code that
needs it is not a valid parallel loop in any schedule that runs iterations in order.) `mbarrier` returns an
int64 handle so that code storing or passing it keeps working.
"""
from __future__ import annotations

from triton.language import core as tl

from .checks import check

parallel = tl.range
NUM_THREADS = 1   # threads that run one parallel loop's iterations


def _scalar(value: int, dtype, _semantic) -> tl.tensor:
    return _semantic.scalar_constant(value, dtype)


def mbarrier(flag, arrive_count, transaction_count, expect_count, _semantic) -> tl.tensor:
    for name, value in (("flag", flag), ("arrive_count", arrive_count), ("transaction_count", transaction_count),
                        ("expect_count", expect_count)):
        check(isinstance(tl._unwrap_if_constexpr(value), (int, tl.tensor)), f"mbarrier {name} must be an integer")
    return _scalar(0, tl.int64, _semantic)


def check_barrier(bar) -> None:
    check(isinstance(bar, tl.tensor), "expected a barrier made by smt.mbarrier")


def get_num_of_thread(_semantic) -> tl.tensor:
    return _scalar(NUM_THREADS, tl.int32, _semantic)


def compile_hint(ptr, hint_name, hint_val) -> None:
    """Hints name optimisations of spine-triton's compiler; Spine has none of them, and ignores hints."""
    check(isinstance(tl._unwrap_if_constexpr(hint_name), str), f"hint name must be a string, got {hint_name}")
    value = tl._unwrap_if_constexpr(hint_val)
    check(value is None or isinstance(value, (bool, int)), f"hint value must be a bool or an int, got {value}")
