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
