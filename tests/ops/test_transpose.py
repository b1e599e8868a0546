import pytest
import torch
import triton

from tests.kernels import transpose_kernel


@pytest.mark.parametrize("m,n", [(1, 1), (50, 70), (33, 16), (64, 127)])
def test_transpose(target, m, n):
    x = torch.randn(m, n)
    out = torch.empty(n, m)
    grid = (triton.cdiv(m, 16), triton.cdiv(n, 32))
    transpose_kernel[grid](x, out, m, n, x.stride(0), x.stride(1), out.stride(0), out.stride(1), BM=16, BN=32)
    torch.testing.assert_close(out, x.t(), rtol=0, atol=0)


def test_transpose_of_a_view(target):
    # Strides come from the arguments: transposing an already transposed view gives the original.
    x = torch.randn(40, 30)
    view = x.t()
    out = torch.empty(40, 30)
    transpose_kernel[(3, 3)](view, out, 30, 40, view.stride(0), view.stride(1), out.stride(0), out.stride(1),
                             BM=16, BN=16)
    torch.testing.assert_close(out, x, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.float16])
def test_transpose_into_a_wider_matrix(target, dtype):
    """Whole tiles are written across the destination's rows by blocks transposed in registers on x86
    (32-bit elements), edge tiles and 16-bit elements element by element; the destination is a view whose
    rows are 100 elements apart and start 3 elements in, and nothing outside it is written."""
    m, n = 45, 70
    x = torch.randn(m, n).mul(100).to(dtype)
    storage = torch.full((n, 100), -7).to(dtype)
    out = storage[:, 3:3 + m]
    transpose_kernel[(triton.cdiv(m, 16), triton.cdiv(n, 16))](x, out, m, n, x.stride(0), x.stride(1),
                                                               out.stride(0), out.stride(1), BM=16, BN=16)
    torch.testing.assert_close(out, x.t(), rtol=0, atol=0)
    assert (storage[:, :3] == -7).all() and (storage[:, 3 + m:] == -7).all()
