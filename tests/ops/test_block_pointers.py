"""Block pointers (tl.make_block_ptr / tl.advance), as spine-triton's tutorials write kernels."""
import pytest
import torch
import triton
import triton.language as tl


@triton.jit
def block_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm,
                        stride_cn, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    a_block = tl.make_block_ptr(a_ptr, shape=(M, K), strides=(stride_am, stride_ak), offsets=(pid_m * BM, 0),
                                block_shape=(BM, BK), order=(1, 0))
    b_block = tl.make_block_ptr(b_ptr, shape=(K, N), strides=(stride_bk, stride_bn), offsets=(0, pid_n * BN),
                                block_shape=(BK, BN), order=(1, 0))
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for _ in range(0, K, BK):
        a = tl.load(a_block, boundary_check=(0, 1), padding_option="zero")
        b = tl.load(b_block, boundary_check=(0, 1), padding_option="zero")
        acc = tl.dot(a, b, acc)
        a_block = tl.advance(a_block, (0, BK))
        b_block = tl.advance(b_block, (BK, 0))
    c_block = tl.make_block_ptr(c_ptr, shape=(M, N), strides=(stride_cm, stride_cn), offsets=(pid_m * BM, pid_n * BN),
                                block_shape=(BM, BN), order=(1, 0))
    tl.store(c_block, acc.to(c_ptr.dtype.element_ty), boundary_check=(0, 1))


@pytest.mark.parametrize("m,n,k", [(32, 32, 32), (37, 29, 45)])
def test_block_pointer_matmul(target, m, n, k):
    a = torch.randn(m, k)
    b = torch.randn(k, n)
    c = torch.full((m, n), 7.0)
    grid = (triton.cdiv(m, 16), triton.cdiv(n, 16))
    block_matmul_kernel[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                              c.stride(1), BM=16, BN=16, BK=16)
    torch.testing.assert_close(c, a @ b, rtol=1e-4, atol=1e-4)


@triton.jit
def padded_copy_kernel(x_ptr, out_ptr, M, N, off_m, off_n, BM: tl.constexpr, BN: tl.constexpr,
                       NAN: tl.constexpr):
    src = tl.make_block_ptr(x_ptr, shape=(M, N), strides=(N, 1), offsets=(off_m, off_n), block_shape=(BM, BN),
                            order=(1, 0))
    if NAN:
        tile = tl.load(src, boundary_check=(0, 1), padding_option="nan")
    else:
        tile = tl.load(src, boundary_check=(0, 1), padding_option="zero")
    dst = tl.make_block_ptr(out_ptr, shape=(BM, BN), strides=(BN, 1), offsets=(0, 0), block_shape=(BM, BN),
                            order=(1, 0))
    tl.store(dst, tile)


@pytest.mark.parametrize("nan", [False, True])
def test_boundary_check_pads_outside_the_tensor(target, nan):
    m, n = 10, 12
    x = torch.randn(m, n)
    out = torch.empty(8, 8)
    padded_copy_kernel[(1,)](x, out, m, n, 6, -3, BM=8, BN=8, NAN=nan)
    expected = torch.full((8, 8), float("nan") if nan else 0.0)
    expected[0:4, 3:8] = x[6:10, 0:5]
    torch.testing.assert_close(out, expected, equal_nan=True)


@triton.jit
def scale_rows_1d_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    src = tl.make_block_ptr(x_ptr, shape=(n,), strides=(1,), offsets=(pid * BLOCK,), block_shape=(BLOCK,), order=(0,))
    dst = tl.make_block_ptr(out_ptr, shape=(n,), strides=(1,), offsets=(pid * BLOCK,), block_shape=(BLOCK,),
                            order=(0,))
    tl.store(dst, tl.load(src, boundary_check=(0,)) * 3.0, boundary_check=(0,))


def test_one_dimensional_block_pointer_stores_only_inside(target):
    x = torch.randn(100)
    out = torch.full((128,), -1.0)
    scale_rows_1d_kernel[(4,)](x, out, 100, BLOCK=32)
    torch.testing.assert_close(out[:100], x * 3)
    assert torch.all(out[100:] == -1.0)
