"""bf16 values LLVM narrows with a __truncsfbf2 call on targets without bf16 instructions (riscv64): kept in
registers across a scan's loop, or added atomically. Each kernel carries its own helper (compiler/lower.py)."""
import torch
import triton
import triton.language as tl


@triton.jit
def running_max(a, b):
    return tl.where(a > b, a, b)


@triton.jit
def cummax_kernel(x_ptr, out_ptr, M: tl.constexpr, N: tl.constexpr):
    offs = tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :]
    tl.store(out_ptr + offs, tl.associative_scan(tl.load(x_ptr + offs), 1, running_max))


def test_bf16_scan_across_a_loop(target):
    x = torch.randn(4, 256).bfloat16()
    out = torch.empty_like(x)
    cummax_kernel[(1,)](x, out, M=4, N=256)
    assert torch.equal(out, torch.cummax(x.float(), 1).values.bfloat16())


@triton.jit
def atomic_add_kernel(acc_ptr, x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.atomic_add(acc_ptr + offs % 4, tl.load(x_ptr + offs))


def test_bf16_atomic_add(target):
    x = torch.tensor([1.0, 2.0, 0.5, -1.0] * 4).bfloat16()
    acc = torch.zeros(4).bfloat16()
    atomic_add_kernel[(1,)](acc, x, BLOCK=16)
    assert acc.float().tolist() == [4.0, 8.0, 2.0, -4.0]
