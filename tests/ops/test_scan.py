import pytest
import torch
import triton
import triton.language as tl


@triton.jit
def cumsum_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr, REVERSE: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr + offs, tl.cumsum(x, axis=0, reverse=REVERSE), mask=offs < n)


@pytest.mark.parametrize("reverse", [False, True])
def test_cumsum(target, reverse):
    x = torch.randn(100)
    out = torch.empty(100)
    cumsum_kernel[(1,)](x, out, 100, BLOCK=128, REVERSE=reverse)
    expected = x.flip(0).cumsum(0).flip(0) if reverse else x.cumsum(0)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)


@triton.jit
def _max_combine(a, b):
    return tl.maximum(a, b)


@triton.jit
def running_max_rows_kernel(x_ptr, out_ptr, prod_ptr, M: tl.constexpr, N: tl.constexpr):
    rm = tl.arange(0, M)
    rn = tl.arange(0, N)
    x = tl.load(x_ptr + rm[:, None] * N + rn[None, :])
    tl.store(out_ptr + rm[:, None] * N + rn[None, :], tl.associative_scan(x, 1, _max_combine))
    tl.store(prod_ptr + rm[:, None] * N + rn[None, :], tl.cumprod(x, axis=0))


def test_associative_scan_along_rows_and_cumprod_along_columns(target):
    x = torch.rand(8, 16) + 0.5
    out = torch.empty(8, 16)
    prod = torch.empty(8, 16)
    running_max_rows_kernel[(1,)](x, out, prod, M=8, N=16)
    torch.testing.assert_close(out, torch.cummax(x, dim=1).values)
    torch.testing.assert_close(prod, torch.cumprod(x, dim=0), rtol=1e-5, atol=1e-5)


@triton.jit
def int_cumsum_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.cumsum(tl.load(x_ptr + offs), axis=0))


def test_integer_cumsum(target):
    x = torch.randint(-50, 50, (64,), dtype=torch.int32)
    out = torch.empty_like(x)
    int_cumsum_kernel[(1,)](x, out, BLOCK=64)
    torch.testing.assert_close(out, x.cumsum(0).int())


@triton.jit
def bool_scans_kernel(x_ptr, prod_ptr, max_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    flags = tl.load(x_ptr + offs) != 0
    tl.store(prod_ptr + offs, tl.cumprod(flags, axis=0))
    tl.store(max_ptr + offs, tl.associative_scan(flags, 0, _max_combine, reverse=True))


def test_scans_of_boolean_tensors(target):
    x = (torch.rand(32) > 0.2).to(torch.int8)
    prod, running = torch.empty(32, dtype=torch.bool), torch.empty(32, dtype=torch.bool)
    bool_scans_kernel[(1,)](x, prod, running, BLOCK=32)
    assert torch.equal(prod, x.cumprod(0).bool())
    assert torch.equal(running, x.flip(0).cummax(0).values.flip(0).bool())
