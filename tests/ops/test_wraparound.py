"""Remainders of tile indices (`(pid * B + tl.arange(0, B)) % M`: Triton's matmul tutorial, Inductor's and
FlagGems' templates): a strided copy where the tile wraps nowhere, a gather of the exact addresses where
it does (spine/to_linalg/wraparound.py). Both targets; sizes that wrap inside a tile and sizes that do not."""
import pytest
import torch
import triton
import triton.language as tl


@triton.jit
def matmul_mod_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm,
                      stride_cn, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """Triton's matmul tutorial: rows and columns kept in bounds by remainders, K masked."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
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
    offs_cm = pid_m * BM + tl.arange(0, BM)
    offs_cn = pid_n * BN + tl.arange(0, BN)
    c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_cm[:, None] < M) & (offs_cn[None, :] < N))


@pytest.mark.parametrize("m,n,k,bm,bn,bk", [(64, 64, 64, 16, 16, 16), (45, 70, 37, 16, 16, 16),
                                            (40, 96, 24, 8, 32, 8), (5, 3, 9, 8, 32, 8)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_matmul_tutorial_remainders(target, m, n, k, bm, bn, bk, dtype):
    """(64, 64, 64): no tile wraps. (45, 70, 37) and (40, 96, 24): the last row or column tiles wrap to the
    matrix's first rows. (5, 3, 9): a tile wider than the matrix wraps more than once."""
    a, b = torch.randn(m, k).to(dtype), torch.randn(k, n).to(dtype)
    c = torch.empty(m, n, dtype=dtype)
    matmul_mod_kernel[(triton.cdiv(m, bm), triton.cdiv(n, bn))](
        a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        BM=bm, BN=bn, BK=bk)
    tol = 1e-4 if dtype == torch.float32 else 1e-2
    torch.testing.assert_close(c, (a.float() @ b.float()).to(dtype), rtol=tol, atol=tol)


@triton.jit
def circular_kernel(x_ptr, idx_ptr, out_ptr, n, shift, BLOCK: tl.constexpr):
    """out[i] = x[(i + shift) % n], and the indices themselves into idx: a load through a remainder, and
    the remainder as data (negative shifts included, where it is negative and wraps like C's %)."""
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    j = (i + shift) % n
    tl.store(idx_ptr + i, j)
    safe = tl.where(j < 0, j + n, j)
    tl.store(out_ptr + i, tl.load(x_ptr + safe))


@pytest.mark.parametrize("n,shift", [(64, 0), (64, 3), (50, 0), (50, 17), (50, -5)])
def test_a_tile_through_a_remainder(target, n, shift):
    block, programs = 16, 4
    x = torch.randn(n)
    idx = torch.empty(block * programs, dtype=torch.int32)
    out = torch.empty(block * programs)
    circular_kernel[(programs,)](x, idx, out, n, shift, BLOCK=block)
    i = torch.arange(block * programs)
    want = torch.fmod(i + shift, n)    # C's remainder: the sign of the dividend
    assert torch.equal(idx, want.to(torch.int32))
    assert torch.equal(out, x[torch.where(want < 0, want + n, want)])


@triton.jit
def scatter_mod_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """out[(i % n)] = x[i] for the first n of the i: a store through a remainder, masked."""
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + i % n, tl.load(x_ptr + i, mask=i < n, other=0.0), mask=i < n)


@pytest.mark.parametrize("n", [64, 50])
def test_a_store_through_a_remainder(target, n):
    x = torch.randn(64)
    out = torch.zeros(n)
    scatter_mod_kernel[(4,)](x, out, n, BLOCK=16)
    assert torch.equal(out, x[:n])
