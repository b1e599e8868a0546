"""tl.assume (llvm.intr.assume in TTIR, emitted by Inductor's Triton templates) is a hint: the kernel
compiles and computes as without it."""
import torch
import triton
import triton.language as tl


@triton.jit
def scaled_copy_kernel(x_ptr, y_ptr, n, stride, BLOCK: tl.constexpr):
    tl.assume(n > 0)
    tl.assume(stride > 0)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs * stride, mask=offs < n) * 2, mask=offs < n)


def test_assume_is_a_hint(target):
    x = torch.randn(200)
    y = torch.empty(100)
    scaled_copy_kernel[(4,)](x, y, 100, 2, BLOCK=32)
    torch.testing.assert_close(y, x[::2] * 2)


def test_assumption_on_a_scalar_reaches_llvm(target):
    # Triton's own test_assume checks the LLVM IR for it; LLVM may then drop the branch it makes dead.
    x = torch.randn(200)
    y = torch.empty(100)
    compiled = scaled_copy_kernel[(4,)](x, y, 100, 2, BLOCK=32)
    assert "llvm.assume" in compiled.asm["llir"]
    torch.testing.assert_close(y, x[::2] * 2)
