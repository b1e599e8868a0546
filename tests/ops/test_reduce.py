import pytest
import torch
import triton
import triton.language as tl

from tests.kernels import col_sum_kernel, row_reduce_kernel


@pytest.mark.parametrize("m,n", [(1, 1), (30, 50), (9, 64)])
def test_row_sum_max_min(target, m, n):
    x = torch.randn(m, n)
    sums, maxs, mins = torch.empty(m), torch.empty(m), torch.empty(m)
    row_reduce_kernel[(triton.cdiv(m, 8),)](x, sums, maxs, mins, m, n, x.stride(0), BM=8,
                                            BN=triton.next_power_of_2(n))
    torch.testing.assert_close(sums, x.sum(1), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(maxs, x.max(1).values)
    torch.testing.assert_close(mins, x.min(1).values)


@triton.jit
def argmax_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=-float("inf"))
    tl.store(out_ptr, tl.argmax(x, axis=0))


def test_argmax_two_operand_combiner(target):
    x = torch.randn(77)
    out = torch.empty(1, dtype=torch.int32)
    argmax_kernel[(1,)](x, out, 77, BLOCK=128)
    assert out.item() == int(torch.argmax(x))


@triton.jit
def _mul_combine(a, b):
    return a * b


@triton.jit
def product_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=1.0)
    tl.store(out_ptr, tl.reduce(x, 0, _mul_combine))


def test_user_defined_combiner(target):
    x = torch.rand(20) + 0.5
    out = torch.empty(1)
    product_kernel[(1,)](x, out, 20, BLOCK=32)
    torch.testing.assert_close(out[0], torch.prod(x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("m,n", [(45, 33), (8, 16)])
def test_column_sum_loop(target, m, n):
    x = torch.randn(m, n)
    out = torch.empty(n)
    col_sum_kernel[(triton.cdiv(n, 16),)](x, out, m, n, x.stride(0), BM=8, BN=16)
    torch.testing.assert_close(out, x.sum(0), rtol=1e-5, atol=1e-5)


@triton.jit
def bool_reductions_kernel(x_ptr, any_ptr, arg_ptr, rows_ptr, N: tl.constexpr):
    # Reductions over a boolean tile: xor, argmax, and a row-wise reduction kept 1-D.
    rm = tl.arange(0, 4)
    rn = tl.arange(0, N)
    flags = tl.load(x_ptr + rm[:, None] * N + rn[None, :]) != 0
    tl.store(any_ptr, tl.xor_sum(tl.xor_sum(flags, axis=1), axis=0))
    tl.store(arg_ptr + rm, tl.argmax(flags, axis=1))
    tl.store(rows_ptr + rm, tl.reduce(flags, 1, _or))


@triton.jit
def _or(a, b):
    return a | b


def test_reductions_of_boolean_tensors(target):
    x = (torch.rand(4, 16) > 0.6).to(torch.int8)
    x[2] = 0
    parity, arg = torch.empty(1, dtype=torch.bool), torch.empty(4, dtype=torch.int32)
    rows = torch.empty(4, dtype=torch.bool)
    bool_reductions_kernel[(1,)](x, parity, arg, rows, N=16)
    assert parity.item() == bool(x.sum().item() % 2)
    assert torch.equal(arg, x.argmax(1).int())
    assert torch.equal(rows, x.bool().any(1))
