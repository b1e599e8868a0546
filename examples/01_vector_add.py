"""Triton's classic vector add, compiled for riscv64 (RVV) and run under QEMU, or on the host."""
import torch
import triton
import triton.language as tl

from _report import activate, report, time_per_launch


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)


def main():
    target = activate()
    n = 98_432
    x, y = torch.rand(n), torch.rand(n)
    out = torch.empty(n)
    grid = (triton.cdiv(n, 1024),)
    seconds = time_per_launch(lambda: add_kernel[grid](x, y, out, n, BLOCK=1024))
    report("vector add", target, out, x + y, seconds, tol=0.0)


if __name__ == "__main__":
    main()
