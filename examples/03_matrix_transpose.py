"""A 2-D tiled transpose: a 2-D grid, strides passed as arguments, masked edge tiles."""
import torch
import triton
import triton.language as tl

from _report import activate, report, time_per_launch


@triton.jit
def transpose_kernel(in_ptr, out_ptr, M, N, stride_im, stride_in, stride_om, stride_on,
                     BM: tl.constexpr, BN: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    tile = tl.load(in_ptr + rm[:, None] * stride_im + rn[None, :] * stride_in, mask=mask)
    tl.store(out_ptr + rn[None, :] * stride_om + rm[:, None] * stride_on, tile, mask=mask)


def main():
    target = activate()
    m, n = 301, 177
    x = torch.randn(m, n)
    out = torch.empty(n, m)
    grid = (triton.cdiv(m, 32), triton.cdiv(n, 32))
    seconds = time_per_launch(lambda: transpose_kernel[grid](
        x, out, m, n, x.stride(0), x.stride(1), out.stride(0), out.stride(1), BM=32, BN=32))
    report("matrix transpose", target, out, x.t(), seconds, tol=0.0)


if __name__ == "__main__":
    main()
