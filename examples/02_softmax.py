"""Row softmax, one program per row, on rows whose length is not a power of two."""
import torch
import triton
import triton.language as tl

from _report import activate, report, time_per_launch


@triton.jit
def softmax_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    tl.store(out_ptr + row * out_row_stride + cols, num / tl.sum(num, axis=0), mask=mask)


def main():
    target = activate()
    rows, cols = 123, 781
    x = torch.randn(rows, cols)
    out = torch.empty_like(x)
    block = triton.next_power_of_2(cols)
    seconds = time_per_launch(
        lambda: softmax_kernel[(rows,)](out, x, x.stride(0), out.stride(0), cols, BLOCK=block))
    report("row softmax", target, out, torch.softmax(x, dim=1), seconds, tol=1e-6)


if __name__ == "__main__":
    main()
