"""tl.device_print and tl.device_assert."""
import pytest
import torch
import triton
import triton.language as tl

from spine.errors import DeviceAssertionError


@triton.jit
def print_kernel(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.device_print("x", tl.load(x_ptr + offs))
    tl.device_print("pid", tl.program_id(0))


def test_device_print(target, capfd):
    if target == "riscv64":
        # The QEMU server prints to the stdout it inherited when it started: start one under capture.
        from spine.driver.cpu_driver import _executor_for
        from spine.targets import riscv64_target
        executor = _executor_for(riscv64_target())
        if hasattr(executor, "shutdown"):
            executor.shutdown()
    print_kernel[(2,)](torch.tensor([1.5, -2.0, 3.25]), BLOCK=2)
    out = capfd.readouterr().out.splitlines()
    assert "pid (0, 0, 0) idx (1) x: -2.000000" in out
    assert "pid (1, 0, 0) idx (0) x: 1.500000" in out
    assert "pid (1, 0, 0) pid: 1" in out
    assert len(out) == 6


@triton.jit(debug=True)
def checked_kernel(x_ptr, out_ptr, n, limit, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.device_assert(x < limit, "value over the limit")
    tl.store(out_ptr + offs, x * 2, mask=mask)


def test_device_assert_passes_and_fails(target):
    x = torch.arange(20, dtype=torch.float32)
    out = torch.empty(20)
    checked_kernel[(2,)](x, out, 20, 100.0, BLOCK=16)
    torch.testing.assert_close(out, x * 2)
    with pytest.raises(DeviceAssertionError, match=r"test_debug_ops.py:\d+.*value over the limit.*idx \(\d+\)"):
        checked_kernel[(2,)](x, out, 20, 12.0, BLOCK=16)
    checked_kernel[(2,)](x, out, 20, 100.0, BLOCK=16)  # the failure was reported once, then cleared
