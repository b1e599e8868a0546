import pytest
import torch
import triton

from tests.kernels import add_kernel


@pytest.mark.parametrize("n", [1, 127, 1024, 98_432])
def test_vector_add(target, n):
    x, y = torch.rand(n), torch.rand(n)
    out = torch.empty(n)
    block = 1024
    add_kernel[(triton.cdiv(n, block),)](x, y, out, n, BLOCK=block)
    torch.testing.assert_close(out, x + y, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.int32, torch.int64])
def test_vector_add_dtypes(target, dtype):
    n = 300
    x = (torch.randn(n) * 50).to(dtype)
    y = (torch.randn(n) * 50).to(dtype)
    out = torch.empty(n, dtype=dtype)
    add_kernel[(3,)](x, y, out, n, BLOCK=128)
    torch.testing.assert_close(out, x + y)


def test_vector_add_writes_only_inside_mask(target):
    n = 100
    x, y = torch.rand(n), torch.rand(n)
    out = torch.full((n + 28,), -7.0)
    add_kernel[(1,)](x, y, out, n, BLOCK=128)
    torch.testing.assert_close(out[:n], x + y)
    assert torch.all(out[n:] == -7.0)


def test_in_place_on_aliasing_views(target):
    # x and out share one storage: the kernel must see its own writes' inputs as torch would.
    base = torch.rand(256)
    expected = base[:200] + base[:200]
    add_kernel[(2,)](base[:200], base[:200], base, 200, BLOCK=128)
    torch.testing.assert_close(base[:200], expected)
