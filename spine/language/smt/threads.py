"""The smt barriers and thread count as reserved device functions (see reference.py for the mechanism):
each reaches TTIR as a `tt.call` of `spine.language.smt.threads.<kind>__...`, which the conversion
(to_linalg/smt_threads.py) turns into a call of Spine's runtime (cpp/parallel_loops.c). The bodies are
never run: they say, for a single thread running the iterations in order, what each call means."""
import triton
import triton.language as tl

# The size of one barrier's state in the runtime (cpp/parallel_loops.c's smt_barrier_t fits in it): the
# distance between the barriers of smt.mbarrier_copies.
BARRIER_BYTES = 64


@triton.jit(noinline=True)
def mbarrier(expected):
    """A barrier expecting `expected` arrivals: its int64 handle (the runtime's barrier lives in the
    program's stack frame)."""
    return expected.to(tl.int64)


@triton.jit(noinline=True)
def mbarrier_copies(expected, copies):
    """`copies` barriers expecting `expected` arrivals each, BARRIER_BYTES apart: the first one's handle
    (`copies` is a constant)."""
    return expected.to(tl.int64) + copies


@triton.jit(noinline=True)
def barrier_arrive(handle):
    """One more arrival."""
    handle += 0


@triton.jit(noinline=True)
def barrier_wait(handle):
    """Returns once the barrier has as many arrivals as it expects."""
    handle += 0


@triton.jit(noinline=True)
def barrier_set_expect(handle, expected):
    """The barrier now expects `expected` arrivals."""
    handle += expected


@triton.jit(noinline=True)
def num_threads():
    """The number of threads this program's parallel loops run on."""
    return tl.full((), 1, tl.int32)
