"""Bad input gets a clear error: never a crash, a hang or a wrong result."""
import platform

import pytest
import torch
import triton
import triton.language as tl

from spine.errors import KernelFault, SpineCompilationError
from tests.kernels import add_kernel


class FakeCudaTensor:
    """Enough of a CUDA tensor for triton's binder to pass it on (no CUDA build of torch here)."""

    def __init__(self, t):
        self._t = t
        self.dtype = t.dtype
        self.device = torch.device("cuda", 0)

    def data_ptr(self):
        return self._t.data_ptr()


def test_cuda_tensor_is_rejected(target):
    x = torch.rand(10)
    with pytest.raises(TypeError, match="x_ptr.*cuda.*CPU tensors"):
        add_kernel[(1,)](FakeCudaTensor(x), x, x, 10, BLOCK=16)


def test_meta_tensor_is_rejected(target):
    x = torch.rand(10)
    with pytest.raises(TypeError, match="out_ptr.*meta"):
        add_kernel[(1,)](x, x, torch.empty(10, device="meta"), 10, BLOCK=16)


def test_unsupported_dtype_is_rejected():
    """Every torch dtype triton's binder accepts is one Spine supports (fp8 included); a pointee type that
    is not (here a 4-bit float) still gets a message saying what was expected."""
    from spine.driver.arguments import Param, check_tensor
    with pytest.raises(ValueError, match="'y_ptr' of kernel 'k' has dtype torch.uint8.*expected one of"):
        check_tensor(Param(1, "y_ptr", "*fp4"), torch.zeros(10, dtype=torch.uint8), "k")


def test_non_tensor_for_a_pointer_is_rejected(target):
    x = torch.rand(10)
    with pytest.raises(TypeError):
        add_kernel[(1,)]([0.0] * 10, x, x, 10, BLOCK=16)


@triton.jit
def inline_asm_kernel(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    y = tl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [x], dtype=tl.float32, is_pure=True, pack=1)
    tl.store(x_ptr + offs, y)


def test_unsupported_op_names_op_and_source_line(target):
    x = torch.rand(16)
    with pytest.raises(SpineCompilationError) as info:
        inline_asm_kernel[(1,)](x, BLOCK=16)
    message = str(info.value)
    assert "tt.elementwise_inline_asm" in message and "inline_asm_kernel" in message
    line = inline_asm_kernel.fn.__code__.co_firstlineno + 4
    assert f"test_errors.py:{line}" in message


@triton.jit
def wild_load_kernel(x_ptr, out_ptr, far):
    tl.store(out_ptr, tl.load(x_ptr + far))


@pytest.mark.skipif(platform.machine() == "riscv64", reason="a fault under QEMU needs a non-riscv host")
def test_fault_under_qemu_raises_and_next_launch_works():
    from spine.driver import CPUDriver
    triton.runtime.driver.set_active(CPUDriver(target="riscv64"))
    x = torch.rand(4)
    out = torch.empty(1)
    with pytest.raises(KernelFault, match="wild_load_kernel"):
        wild_load_kernel[(1,)](x, out, 1 << 44)
    wild_load_kernel[(1,)](x, out, 2)
    assert out.item() == x[2].item()
    y = torch.rand(10)
    res = torch.empty(10)
    add_kernel[(1,)](y, y, res, 10, BLOCK=16)
    torch.testing.assert_close(res, 2 * y)


def test_compilation_error_type():
    assert issubclass(SpineCompilationError, RuntimeError)


@triton.jit
def long_loop_kernel(out_ptr, n):
    acc = 0.0
    for i in range(n):
        acc = acc * 0.5 + 1.0
    tl.store(out_ptr, acc)


@pytest.mark.skipif(platform.machine() == "riscv64", reason="the timeout guards the QEMU server")
def test_hung_kernel_under_qemu_times_out(monkeypatch):
    from spine.driver import CPUDriver
    triton.runtime.driver.set_active(CPUDriver(target="riscv64"))
    out = torch.empty(1)
    long_loop_kernel[(1,)](out, 3)
    monkeypatch.setenv("SPINE_KERNEL_TIMEOUT", "1")
    with pytest.raises(KernelFault, match="did not answer within 1 s"):
        long_loop_kernel[(1,)](out, 2**31 - 1)
    long_loop_kernel[(1,)](out, 3)
    assert out.item() == 1.75


@triton.jit
def wait_for_flag_kernel(flag_ptr, out_ptr):
    """Spins until the flag is set: with a zero flag, never."""
    count = 0
    while tl.load(flag_ptr) == 0:
        count += 1
    tl.store(out_ptr + tl.program_id(0), count)


@pytest.mark.parametrize("threads", ["1", "2"])
def test_hung_kernel_on_the_host_is_stopped(monkeypatch, threads):
    """Every thread running the launch is interrupted once it passes SPINE_KERNEL_TIMEOUT; the launch raises
    KernelFault and the process and its threads stay usable."""
    from spine.driver import CPUDriver
    triton.runtime.driver.set_active(CPUDriver(target="host"))
    monkeypatch.setenv("SPINE_NUM_THREADS", threads)
    monkeypatch.setenv("SPINE_KERNEL_TIMEOUT", "1")
    flag, out = torch.zeros(1, dtype=torch.int32), torch.full((4,), -1, dtype=torch.int32)
    for _ in range(2):
        with pytest.raises(KernelFault, match="wait_for_flag_kernel.*ran longer than SPINE_KERNEL_TIMEOUT"):
            wait_for_flag_kernel[(4,)](flag, out)
    flag[0] = 1
    wait_for_flag_kernel[(4,)](flag, out)
    assert out.tolist() == [0, 0, 0, 0]
    long_loop_kernel[(1,)](out.float(), 3)


@triton.jit
def widen_unsigned_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n).to(tl.int64), mask=offs < n)


def test_reinterpreted_unsigned_tensors_are_accepted(target):
    """triton.reinterpret(t, tl.uint32) hands the launcher a TensorWrapper: same memory, unsigned type."""
    x = torch.tensor([0, 1, -1, -2**31, 2**31 - 1], dtype=torch.int32)
    out = torch.empty(5, dtype=torch.int64)
    widen_unsigned_kernel[(1,)](triton.reinterpret(x, tl.uint32), out, 5, BLOCK=8)
    assert out.tolist() == [0, 1, 2**32 - 1, 2**31, 2**31 - 1]


@triton.jit
def tuple_arguments_kernel(ptrs, scales, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    acc = tl.load(ptrs[0] + offs) * scales[0]
    acc += tl.load(ptrs[1] + offs) * scales[1][0]
    acc += tl.load(ptrs[2] + offs) * scales[1][1]
    tl.store(out_ptr + offs, acc)


def test_tuple_arguments_are_flattened(target):
    xs = tuple(torch.rand(16) for _ in range(3))
    out = torch.empty(16)
    tuple_arguments_kernel[(1,)](xs, (2.0, (3.0, 0.5)), out, BLOCK=16)
    torch.testing.assert_close(out, 2 * xs[0] + 3 * xs[1] + 0.5 * xs[2])
