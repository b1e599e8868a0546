"""smt.parallel on threads: iterations in flight at once, the team size, barriers (ordered by arrivals,
never hanging), a fault on any thread of a team raised by the launch, spine-triton's SPLIT_M / SPLIT_MN matmul with one program (so its loop gets a team),
and the mark that only smt.parallel loops carry."""
import os

import pytest
import torch
import triton
import triton.language as tl
import triton.language.extra.smt as smt

from spine.errors import DeviceAssertionError, KernelFault
from tests.kernels import add_kernel

from .test_smt_mm import check, smt_mm

CORES = os.cpu_count() or 1
needs_two_cores = pytest.mark.skipif(CORES < 2, reason="a team needs two cores")


@triton.jit
def all_in_flight_kernel(out_ptr):
    """Each iteration arrives, then waits for every iteration's arrival: it completes only when all of them
    are in flight at once, on threads of their own."""
    n = smt.get_num_of_thread()
    bar = smt.mbarrier(expect_count=n)
    for s in smt.parallel(0, n):
        smt.barrier_arrive(bar)
        smt.barrier_wait(bar, flag=1)
        tl.store(out_ptr + s, s + 1)
    tl.store(out_ptr + 15, n)


@needs_two_cores
def test_iterations_run_concurrently(target):
    out = torch.zeros(16, dtype=torch.int32)
    all_in_flight_kernel[(1,)](out)
    n = out[15].item()
    assert n == min(CORES, 15)
    assert out[:n].tolist() == list(range(1, n + 1))


@triton.jit
def two_arrivals_kernel(out_ptr):
    bar = smt.mbarrier(expect_count=2)
    for s in smt.parallel(0, 2):
        smt.barrier_arrive(bar)
        smt.barrier_wait(bar)
        tl.store(out_ptr + tl.program_id(0) * 2 + s, s + 1)
    tl.store(out_ptr + 64 + tl.program_id(0), smt.get_num_of_thread())


def test_a_wait_that_cannot_complete_is_reported(target):
    """With a program per core, loops run in order: the first iteration's wait for the second's arrival
    can never complete, and the launch says so instead of hanging."""
    out = torch.zeros(128, dtype=torch.int32)
    with pytest.raises(DeviceAssertionError, match="can never complete"):
        two_arrivals_kernel[(CORES,)](out)
    if CORES >= 2:
        two_arrivals_kernel[(1,)](out)     # one program: the two iterations run together
        assert out[:2].tolist() == [1, 2] and out[64].item() == CORES


@triton.jit
def ordered_kernel(out_ptr, N: tl.constexpr):
    """Iteration s > 0 waits for iteration s - 1's barrier, then reads what it stored."""
    bars = smt.mbarrier(expect_count=1)
    bar1 = smt.mbarrier(expect_count=1)
    bar2 = smt.mbarrier(expect_count=1)
    for s in smt.parallel(0, 4):
        if s == 1:
            smt.barrier_wait(bars)
        elif s == 2:
            smt.barrier_wait(bar1)
        elif s == 3:
            smt.barrier_wait(bar2)
        previous = tl.load(out_ptr + tl.maximum(s - 1, 0) * N + tl.arange(0, N))
        tl.store(out_ptr + s * N + tl.arange(0, N), tl.where(s == 0, 1, previous + 1))
        if s == 0:
            smt.barrier_arrive(bars)
        elif s == 1:
            smt.barrier_arrive(bar1)
        elif s == 2:
            smt.barrier_arrive(bar2)


def test_barriers_order_iterations(target):
    out = torch.zeros(4, 256, dtype=torch.int32)
    ordered_kernel[(1,)](out, N=256)
    assert torch.equal(out, torch.arange(1, 5, dtype=torch.int32)[:, None].expand(4, 256))


@triton.jit
def wild_iteration_kernel(out_ptr, faulting, far):
    """Iteration `faulting` stores far outside `out`; its partner waits for an arrival that never comes."""
    bar = smt.mbarrier(expect_count=2)
    for s in smt.parallel(0, 2):
        tl.store(out_ptr + s + tl.where(s == faulting, far, 0), s + 1)
        smt.barrier_arrive(bar)
        smt.barrier_wait(bar)


@needs_two_cores
@pytest.mark.parametrize("faulting", [0, 1], ids=["program_thread", "helper_thread"])
def test_a_fault_on_any_thread_of_a_team_is_raised(target, faulting):
    """One program, so its loop runs on a team of two: iteration 0 on the program's own thread, 1 on a
    helper. Either one faulting raises KernelFault (not a dead process), and the next launches work."""
    out = torch.zeros(2, dtype=torch.int32)
    for _ in range(2):
        with pytest.raises(KernelFault, match="wild_iteration_kernel.*SIGSEGV"):
            wild_iteration_kernel[(1,)](out, faulting, 1 << 42)
    wild_iteration_kernel[(1,)](out, faulting, 0)
    assert out.tolist() == [1, 2]
    x = torch.rand(100)
    y = torch.empty(100)
    add_kernel[(2,)](x, x, y, 100, BLOCK=64)
    torch.testing.assert_close(y, 2 * x)


@triton.jit
def stuck_iteration_kernel(flag_ptr, out_ptr):
    """Iteration 1 (a helper thread's, on a team of two) waits for a flag nobody sets."""
    for s in smt.parallel(0, 2):
        count = 0
        if s == 1:
            while tl.load(flag_ptr) == 0:
                count += 1
        tl.store(out_ptr + s, count + s + 1)


@needs_two_cores
def test_a_stuck_helper_thread_is_stopped_on_the_host(monkeypatch):
    from spine.driver import CPUDriver
    triton.runtime.driver.set_active(CPUDriver(target="host"))
    monkeypatch.setenv("SPINE_KERNEL_TIMEOUT", "1")
    flag, out = torch.zeros(1, dtype=torch.int32), torch.zeros(2, dtype=torch.int32)
    with pytest.raises(KernelFault, match="ran longer than SPINE_KERNEL_TIMEOUT"):
        stuck_iteration_kernel[(1,)](flag, out)
    flag[0] = 1
    stuck_iteration_kernel[(1,)](flag, out)
    assert out.tolist() == [1, 2]


@pytest.mark.parametrize("split", ["split_m", "split_mn"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_one_program_matmul_on_a_team(target, split, dtype):
    """One program for all of C (M and N within one block): its parallel loop over sub-blocks gets every
    core; SPLIT_MN's waiting sub-blocks depend on the first row's staging of B through the barriers."""
    m, n, k = 45, 60, 50
    a = torch.randn(m, k).to(dtype)
    b = torch.randn(k, n).to(dtype)
    check(smt_mm(a, b, split, block_m=64, block_n=64), a, b)


@triton.jit
def stepped_kernel(out_ptr, n, step, STEP: tl.constexpr):
    for s in smt.parallel(0, n, STEP):
        tl.store(out_ptr + s, s + 1)
    for s in smt.parallel(0, n, step * 3):       # a step computed in the kernel
        tl.store(out_ptr + 16 + s, s + 1)


def test_parallel_loops_take_a_step(target):
    out = torch.zeros(32, dtype=torch.int32)
    stepped_kernel[(1,)](out, 7, 1, STEP=2)
    assert out[:8].tolist() == [1, 0, 3, 0, 5, 0, 7, 0]
    assert out[16:24].tolist() == [1, 0, 0, 4, 0, 0, 7, 0]
    with pytest.raises(triton.CompilationError, match="positive step"):
        stepped_kernel[(1,)](out, 7, 1, STEP=-2)


@triton.jit
def loops_kernel(x_ptr, out_ptr, N: tl.constexpr):
    total = tl.zeros((N,), dtype=tl.float32)
    for i in range(2):
        total += tl.load(x_ptr + i * N + tl.arange(0, N))
    for j in tl.range(0, 2):
        total += 1.0
    for s in smt.parallel(0, 2, bind_sub_block=True):
        tl.store(out_ptr + s * N + tl.arange(0, N), total + s)
    for t in tl.range(0, 2, num_stages=1):
        tl.store(out_ptr + 2 * N + t, t)


def test_only_parallel_loops_are_marked(target):
    x = torch.randn(2, 16)
    out = torch.zeros(3, 16)
    compiled = loops_kernel[(1,)](x, out, N=16)
    expected = x.sum(0) + 2
    torch.testing.assert_close(out[:2], torch.stack([expected, expected + 1]))
    for stage in ("ttir", "linalg"):
        assert compiled.asm[stage].count("smt.parallel_arg0") == 1, stage
    assert "spine_kmpc_fork_call" in compiled.asm["llir"]


@triton.jit
def ordered_copies_kernel(out_ptr, N: tl.constexpr):
    """ordered_kernel with spine-triton's multi-copy barriers: iteration s > 0 waits for barrier s - 1 (a
    runtime index), iteration s < 3 arrives at barrier s; the last barrier is reached by a constant index."""
    bars = smt.mbarrier_copies(copies=3, expect_count=1)
    for s in smt.parallel(0, 4):
        if s > 0:
            smt.barrier_wait(bars[s - 1])
        previous = tl.load(out_ptr + tl.maximum(s - 1, 0) * N + tl.arange(0, N))
        tl.store(out_ptr + s * N + tl.arange(0, N), tl.where(s == 0, 1, previous + 1))
        if s < 2:
            smt.barrier_arrive(bars[s])
        elif s == 2:
            smt.barrier_arrive(bars[2])


def test_barrier_copies_order_iterations(target):
    out = torch.zeros(4, 256, dtype=torch.int32)
    ordered_copies_kernel[(1,)](out, N=256)
    assert torch.equal(out, torch.arange(1, 5, dtype=torch.int32)[:, None].expand(4, 256))


@triton.jit
def copies_kernel(out_ptr, INDEX: tl.constexpr, COPIES: tl.constexpr):
    bars = smt.mbarrier_copies(copies=COPIES)
    smt.barrier_arrive(bars[INDEX])
    smt.barrier_wait(bars[INDEX])
    tl.store(out_ptr, 1)


@triton.jit
def global_barrier_kernel(out_ptr):
    bar = smt.global_mbarrier(0)
    smt.barrier_arrive(bar)
    tl.store(out_ptr, 1)


def test_barrier_copies_are_checked_and_global_barriers_refused(target):
    from triton.compiler.errors import CompilationError
    out = torch.zeros(1, dtype=torch.int32)
    copies_kernel[(1,)](out, INDEX=3, COPIES=4)
    assert out.item() == 1
    with pytest.raises(CompilationError, match=r"barrier index 4 out of range \[0, 4\)"):
        copies_kernel[(1,)](out, INDEX=4, COPIES=4)
    with pytest.raises(CompilationError, match=r"copies must be a constant integer in \[1, 1024\], got 0"):
        copies_kernel[(1,)](out, INDEX=0, COPIES=0)
    with pytest.raises(CompilationError, match="global_mbarrier is not supported: .* has not started"):
        global_barrier_kernel[(1,)](out)


def test_every_name_smt_exports_resolves():
    """`from triton.language.extra.smt import *` as spine-triton's users write it: every name of its
    `__all__` (which, in spine-triton's own module, lists storage_kind without defining it)."""
    namespace = {}
    exec("from triton.language.extra.smt import *", namespace)
    spine_tritons = {"compile_hint", "parallel", "descriptor_load", "view", "alloc", "alloc_copies", "dot",
                     "mbarrier", "mbarrier_copies", "barrier_arrive", "barrier_wait", "get_num_of_thread",
                     "global_mbarrier", "barrier_set_expect", "storage_kind"}
    assert spine_tritons <= set(namespace)
    assert (smt.storage_kind.L2, smt.storage_kind.SMEM) == ("l2", "smem")
