"""A kernel that faults raises an exception on every target; the process lives on and the next launch
works."""
import platform

import pytest
import torch
import triton
import triton.language as tl

from spine.errors import KernelFault
from tests.kernels import add_kernel


# QEMU's user mode delivers a fault of a masked vector store (the kernel's store is one) as SIGBUS, with no
# address; of a scalar store as SIGSEGV.
QEMU_STORE_FAULT = "(SIGSEGV|SIGBUS)"


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
               else "wild_store_kernel.*" + QEMU_STORE_FAULT)
    with pytest.raises(KernelFault, match=pattern):
        wild_store_kernel[(8,)](out, 1 << 42, 64 * 8, BLOCK=64)
    _next_launch_works()


@pytest.mark.skipif(platform.machine() != "x86_64", reason="x86 says whether a faulting access was a store")
def test_a_wild_store_warns_that_the_process_may_be_damaged():
    """Stores before the faulting one may have hit memory the process uses (with threads, the heap): the
    process lived on after KernelFault, then died of the damage, with nothing pointing at the cause."""
    from spine.driver import CPUDriver
    triton.runtime.driver.set_active(CPUDriver(target="host"))
    out = torch.zeros(64 * 8)
    with pytest.raises(KernelFault, match=r"a store to memory the kernel does not own.*process may be damaged.*"
                                          r"debug=True.*bounds"):
        wild_store_kernel[(8,)](out, 1 << 42, 64 * 8, BLOCK=64)
    x = torch.tensor([7], dtype=torch.int32)
    with pytest.raises(KernelFault) as division:   # a fault that stores nothing says nothing of the kind
        int_divide_kernel[(1,)](x, torch.empty(1, dtype=torch.int32), 0)
    assert "may be damaged" not in str(division.value)


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


@triton.jit(debug=True)
def debug_divide_kernel(x_ptr, out_ptr, d):
    v = tl.load(x_ptr)
    q = v // d  # the faulting line on x86
    tl.store(out_ptr, q)


def _line_of(fn, text: str) -> int:
    import inspect
    lines, first = inspect.getsourcelines(fn.fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


@pytest.mark.skipif(platform.machine() != "x86_64", reason="integer division by zero traps on x86 only")
def test_a_fault_in_a_debug_kernel_names_its_source_line():
    from spine.driver import CPUDriver
    triton.runtime.driver.set_active(CPUDriver(target="host"))
    x = torch.tensor([7], dtype=torch.int32)
    out = torch.empty(1, dtype=torch.int32)
    line = _line_of(debug_divide_kernel, "the faulting line")
    with pytest.raises(KernelFault, match=rf"SIGFPE.*, at .*test_faults\.py:{line}$"):
        debug_divide_kernel[(1,)](x, out, 0)


def test_debug_kernels_for_riscv_carry_line_tables(tmp_path):
    """What names a guest fault's line: the riscv64 object's line table covers the kernel's code with the
    kernel's own source lines."""
    from spine.driver import CPUDriver
    from spine.driver.source_lines import _line_rows, source_line
    triton.runtime.driver.set_active(CPUDriver(target="riscv64"))
    x = torch.tensor([7], dtype=torch.int32)
    compiled = debug_divide_kernel.warmup(x, x, 3, grid=(1,))
    so = tmp_path / "kernel.so"
    so.write_bytes(compiled.kernel)
    rows = _line_rows(str(so))
    assert rows
    first, last = _line_of(debug_divide_kernel, "def debug_divide_kernel"), _line_of(debug_divide_kernel, "tl.store")
    for lo, hi, where in rows:
        path, line = where.rsplit(":", 1)
        assert path.endswith("test_faults.py") and first <= int(line) <= last
        assert source_line(str(so), lo) == where
