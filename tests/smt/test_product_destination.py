"""An fp32 product stored whole goes straight into its destination (compiler/products_into_destination.py):
spine-triton's smt matmul storing into views of larger matrices, whole tiles and edge tiles, with rows a
multiple of 4 KiB apart (kept in a buffer and copied) and not, on both targets against torch.mm."""
import pytest
import torch
import triton

from tests.smt.test_smt_mm import MICRO, mm_kernel


def split_m(a, b, c, block_m: int, block_n: int, sub_m: int):
    (m, k), n = a.shape, b.shape[1]
    micro_m, micro_k, micro_n = MICRO[a.dtype]
    block_k = triton.next_power_of_2(k)
    mm_kernel[(triton.cdiv(m, block_m), triton.cdiv(n, block_n))](
        a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        BLOCK_SIZE_M=block_m, BLOCK_SIZE_N=block_n, BLOCK_SIZE_K=block_k, SPLIT_M=1, SPLIT_MN=0, SPLIT_K=0,
        SUB_BLK_M=sub_m, SUB_BLK_N=32, SUB_BLK_K=block_k, MICRO_M=micro_m, MICRO_K=micro_k, MICRO_N=micro_n)


@pytest.mark.parametrize("m,n,width", [(64, 64, 96), (64, 64, 1024), (50, 70, 100), (64, 128, 128)])
def test_products_land_in_views_of_larger_matrices(target, m, n, width):
    """C is the first n columns of a matrix `width` columns wide; the columns past n stay as they were."""
    k = 40
    a, b = torch.randn(m, k), torch.randn(k, n)
    wide = torch.randn(m, width)
    before = wide.clone()
    split_m(a, b, wide[:, :n], 32, 64, 16)
    torch.testing.assert_close(wide[:, :n], a @ b, rtol=1e-4, atol=1e-4)
    assert torch.equal(wide[:, n:], before[:, n:])
