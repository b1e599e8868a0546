"""A kernel that faults raises an exception on every target; the process lives on and the next launch
works."""
import platform

import pytest
import torch
import triton
import triton.language as tl

from spine.errors import KernelFault
from tests.kernels import add_kernel


@triton.jit
def wild_store_kernel(out_ptr, far, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    # Only the last program stores far away; the others write their share of `out`.
    where = tl.where(tl.program_id(0) == tl.num_programs(0) - 1, offs + far, offs)
    tl.store(out_ptr + where, offs.to(tl.float32), mask=offs < n)


@triton.jit
def int_divide_kernel(x_ptr, out_ptr, d):
    tl.store(out_ptr, tl.load(x_ptr) // d)


def _next_launch_works():
    x = torch.rand(100)
    out = torch.empty(100)
    add_kernel[(2,)](x, x, out, 100, BLOCK=64)
    torch.testing.assert_close(out, 2 * x)


@pytest.mark.parametrize("threads", ["1", "2"])
def test_wild_store_raises_naming_kernel_and_program(target, monkeypatch, threads):
    monkeypatch.setenv("SPINE_NUM_THREADS", threads)
    out = torch.zeros(64 * 8)
    pattern = ("wild_store_kernel.*SIGSEGV.*invalid memory access.*program \\(7, 0, 0\\)" if target == "host"
               else "wild_store_kernel.*SIGSEGV")
    with pytest.raises(KernelFault, match=pattern):
        wild_store_kernel[(8,)](out, 1 << 42, 64 * 8, BLOCK=64)
    _next_launch_works()


def test_repeated_faults_leave_the_process_usable(target):
    out = torch.zeros(64)
    for _ in range(5):
        with pytest.raises(KernelFault):
            wild_store_kernel[(1,)](out, 1 << 42, 64, BLOCK=64)
    _next_launch_works()


@pytest.mark.skipif(platform.machine() != "x86_64", reason="integer division by zero traps on x86 only")
def test_integer_division_by_zero_on_the_host_raises():
    from spine.driver import CPUDriver
    triton.runtime.driver.set_active(CPUDriver(target="host"))
    x = torch.tensor([7], dtype=torch.int32)
    out = torch.empty(1, dtype=torch.int32)
    with pytest.raises(KernelFault, match="SIGFPE.*integer division by zero"):
        int_divide_kernel[(1,)](x, out, 0)
    int_divide_kernel[(1,)](x, out, 2)
    assert out.item() == 3


def test_faults_outside_kernels_still_reach_their_handler():
    """The guard only catches faults in kernel code: a fault elsewhere in the process (here a child
    process that loaded the runtime) still ends it the usual way."""
    import subprocess
    import sys
    code = ("import ctypes, torch, triton\n"
            "from spine.driver import CPUDriver\n"
            "from tests.kernels import add_kernel\n"
            "triton.runtime.driver.set_active(CPUDriver(target='host'))\n"
            "x = torch.rand(4); add_kernel[(1,)](x, x, x, 4, BLOCK=4)\n"
            "ctypes.string_at(8)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "Segmentation fault" in proc.stderr or proc.returncode == -11
