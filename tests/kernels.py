"""Kernels shared by tests, examples and benchmarks."""
import triton
import triton.language as tl

from spine.language.cpu import libdevice


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)


@triton.jit
def softmax_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    den = tl.sum(num, axis=0)
    tl.store(out_ptr + row * out_row_stride + cols, num / den, mask=mask)


@triton.jit
def transpose_kernel(in_ptr, out_ptr, M, N, stride_im, stride_in, stride_om, stride_on,
                     BM: tl.constexpr, BN: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    tile = tl.load(in_ptr + rm[:, None] * stride_im + rn[None, :] * stride_in, mask=mask)
    tl.store(out_ptr + rn[None, :] * stride_om + rm[:, None] * stride_on, tile, mask=mask)


@triton.jit
def row_reduce_kernel(x_ptr, sum_ptr, max_ptr, min_ptr, M, N, stride_m,
                      BM: tl.constexpr, BN: tl.constexpr):
    pid = tl.program_id(0)
    rm = pid * BM + tl.arange(0, BM)
    rn = tl.arange(0, BN)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    x = tl.load(x_ptr + rm[:, None] * stride_m + rn[None, :], mask=mask, other=0.0)
    tl.store(sum_ptr + rm, tl.sum(x, axis=1), mask=rm < M)
    x_hi = tl.where(mask, x, -float("inf"))
    tl.store(max_ptr + rm, tl.max(x_hi, axis=1), mask=rm < M)
    x_lo = tl.where(mask, x, float("inf"))
    tl.store(min_ptr + rm, tl.min(x_lo, axis=1), mask=rm < M)


@triton.jit
def col_sum_kernel(x_ptr, out_ptr, M, N, stride_m, BM: tl.constexpr, BN: tl.constexpr):
    pid = tl.program_id(0)
    rn = pid * BN + tl.arange(0, BN)
    acc = tl.zeros((BN,), dtype=tl.float32)
    for start in range(0, M, BM):
        rm = start + tl.arange(0, BM)
        mask = (rm[:, None] < M) & (rn[None, :] < N)
        x = tl.load(x_ptr + rm[:, None] * stride_m + rn[None, :], mask=mask, other=0.0)
        acc += tl.sum(x, axis=0)
    tl.store(out_ptr + rn, acc, mask=rn < N)


@triton.jit
def row_sum_pointer_loop_kernel(x_ptr, out_ptr, N, stride_m, BLOCK: tl.constexpr):
    """A loop that advances a pointer tensor (`ptrs += BLOCK`), as K loops of matmuls do."""
    row = tl.program_id(0)
    ptrs = x_ptr + row * stride_m + tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += tl.load(ptrs, mask=cols < N, other=0.0)
        ptrs += BLOCK
    tl.store(out_ptr + row, tl.sum(acc, axis=0))


@triton.jit
def elementwise_math_kernel(x_ptr, out_ptr, n, scale, BLOCK: tl.constexpr, OP: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=1.0)
    if OP == "exp":
        y = tl.exp(x)
    elif OP == "log":
        y = tl.log(tl.abs(x) + 1.0)
    elif OP == "sqrt":
        y = tl.sqrt(tl.abs(x))
    elif OP == "abs":
        y = tl.abs(x)
    elif OP == "max":
        y = tl.maximum(x, scale)
    elif OP == "min":
        y = tl.minimum(x, scale)
    elif OP == "where":
        y = tl.where(x > scale, x, -x)
    elif OP == "erf":
        y = libdevice.erf(x)
    else:
        y = x * scale
    tl.store(out_ptr + offs, y, mask=mask)


@triton.jit
def int_arith_kernel(a_ptr, b_ptr, out_ptr, n, k, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(a_ptr + offs, mask=mask, other=0)
    b = tl.load(b_ptr + offs, mask=mask, other=1)
    tl.store(out_ptr + offs, tl.maximum(a * k + b, a - b), mask=mask)


@triton.jit
def cast_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, (x.to(tl.float32) * 2.0).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def gather_kernel(x_ptr, idx_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    idx = tl.load(idx_ptr + offs, mask=mask, other=0)
    tl.store(out_ptr + offs, tl.load(x_ptr + idx, mask=mask), mask=mask)


@triton.jit
def scalar_kernel(x_ptr, out_ptr, bias):
    tl.store(out_ptr + tl.program_id(0), tl.load(x_ptr + tl.program_id(0)) + bias)
