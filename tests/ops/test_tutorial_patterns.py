"""Patterns from Triton's tutorials that stress the conversion beyond the basic tests."""
import pytest
import torch
import triton
import triton.language as tl


@triton.jit
def grouped_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                          stride_cm, stride_cn, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                          GROUP_M: tl.constexpr, ACTIVATION: tl.constexpr):
    # Grouped program ordering and wrap-around (modulo) row/column offsets, masks only along K.
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BM)
    num_pid_n = tl.cdiv(N, BN)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    offs_am = (pid_m * BM + tl.arange(0, BM)) % M
    offs_bn = (pid_n * BN + tl.arange(0, BN)) % N
    offs_k = tl.arange(0, BK)
    a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
    b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BK, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BK, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BK * stride_ak
        b_ptrs += BK * stride_bk
    if ACTIVATION == "leaky_relu":
        acc = tl.where(acc >= 0, acc, 0.01 * acc)
    c = acc.to(tl.float16)
    offs_cm = pid_m * BM + tl.arange(0, BM)
    offs_cn = pid_n * BN + tl.arange(0, BN)
    c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
    tl.store(c_ptrs, c, mask=(offs_cm[:, None] < M) & (offs_cn[None, :] < N))


@pytest.mark.parametrize("activation", ["", "leaky_relu"])
def test_grouped_matmul_with_wraparound_offsets(target, activation):
    m, n, k = 45, 37, 50
    a = torch.randn(m, k).half()
    b = torch.randn(k, n).half()
    c = torch.empty(m, n, dtype=torch.float16)
    grid = (triton.cdiv(m, 16) * triton.cdiv(n, 16),)
    grouped_matmul_kernel[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                                c.stride(1), BM=16, BN=16, BK=16, GROUP_M=2, ACTIVATION=activation)
    ref = a.float() @ b.float()
    if activation:
        ref = torch.where(ref >= 0, ref, 0.01 * ref)
    torch.testing.assert_close(c, ref.half(), rtol=1e-2, atol=1e-2)


@triton.jit
def layer_norm_kernel(x_ptr, y_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, stride, N, eps, BLOCK: tl.constexpr):
    # Several passes over a row in blocks, scalar accumulators, rsqrt, per-row scalar stores.
    row = tl.program_id(0)
    y_ptr += row * stride
    x_ptr += row * stride
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(0, N, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + cols, mask=cols < N, other=0.).to(tl.float32)
    mean = tl.sum(acc, axis=0) / N
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(0, N, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + cols, mask=cols < N, other=0.).to(tl.float32)
        x = tl.where(cols < N, x - mean, 0.)
        acc += x * x
    var = tl.sum(acc, axis=0) / N
    rstd = 1 / tl.sqrt(var + eps)
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, rstd)
    for off in range(0, N, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        mask = cols < N
        w = tl.load(w_ptr + cols, mask=mask)
        b = tl.load(b_ptr + cols, mask=mask)
        x = tl.load(x_ptr + cols, mask=mask, other=0.).to(tl.float32)
        tl.store(y_ptr + cols, (x - mean) * rstd * w + b, mask=mask)


def test_layer_norm(target):
    rows, n = 9, 300
    x = torch.randn(rows, n)
    w, b = torch.rand(n), torch.randn(n)
    y = torch.empty_like(x)
    mean, rstd = torch.empty(rows), torch.empty(rows)
    layer_norm_kernel[(rows,)](x, y, w, b, mean, rstd, x.stride(0), n, 1e-5, BLOCK=128)
    torch.testing.assert_close(y, torch.nn.functional.layer_norm(x, (n,), w, b, 1e-5), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(mean, x.mean(1), rtol=1e-5, atol=1e-5)


@triton.jit
def persistent_softmax_kernel(out_ptr, in_ptr, in_stride, out_stride, n_rows, n_cols, BLOCK: tl.constexpr):
    # Programs stride over rows (`tl.range` with a step of the grid size).
    start = tl.program_id(0)
    step = tl.num_programs(0)
    for row in tl.range(start, n_rows, step):
        cols = tl.arange(0, BLOCK)
        x = tl.load(in_ptr + row * in_stride + cols, mask=cols < n_cols, other=-float("inf"))
        z = x - tl.max(x, axis=0)
        num = tl.exp(z)
        tl.store(out_ptr + row * out_stride + cols, num / tl.sum(num, axis=0), mask=cols < n_cols)


def test_persistent_softmax(target):
    x = torch.randn(23, 70)
    out = torch.empty_like(x)
    persistent_softmax_kernel[(4,)](out, x, x.stride(0), out.stride(0), 23, 70, BLOCK=128)
    torch.testing.assert_close(out, torch.softmax(x, 1))


@triton.jit
def dropout_like_kernel(x_ptr, keep_ptr, out_ptr, n, p, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    keep = tl.load(keep_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.where(keep, x / (1 - p), 0.0), mask=mask)


def test_masked_select_with_bool_input(target):
    x = torch.randn(1000)
    keep = torch.rand(1000) > 0.3
    out = torch.empty(1000)
    dropout_like_kernel[(8,)](x, keep, out, 1000, 0.3, BLOCK=128)
    torch.testing.assert_close(out, torch.where(keep, x / 0.7, 0.0))
