import pytest
import torch
import triton

from tests.kernels import softmax_kernel


@pytest.mark.parametrize("rows,cols", [(1, 1), (17, 100), (33, 257), (5, 1000)])
def test_softmax(target, rows, cols):
    x = torch.randn(rows, cols) * 3
    out = torch.empty_like(x)
    softmax_kernel[(rows,)](out, x, x.stride(0), out.stride(0), cols, BLOCK=triton.next_power_of_2(cols))
    torch.testing.assert_close(out, torch.softmax(x, dim=1), rtol=1e-5, atol=1e-6)


def test_softmax_on_strided_rows(target):
    x = torch.randn(40, 150)[::2, 10:110]
    out = torch.empty(20, 100)
    softmax_kernel[(20,)](out, x, x.stride(0), out.stride(0), 100, BLOCK=128)
    torch.testing.assert_close(out, torch.softmax(x, dim=1), rtol=1e-5, atol=1e-6)
