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


@triton.jit
def half_row_sum_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr + row, tl.sum(x, axis=0))


def _ulps(got: torch.Tensor, exact: torch.Tensor) -> torch.Tensor:
    """How many units in the last place of `got`'s type it is from `exact` (float64)."""
    ulp = torch.finfo(got.dtype).eps * exact.abs().clamp_min(torch.finfo(got.dtype).tiny)
    return (got.double() - exact).abs() / ulp


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_sums_accumulate_in_fp32(target, dtype):
    """Rounded once, at the end (to_linalg/reduce.py): within one unit of the exact sum. A bf16 running sum
    of these 1,000 terms near 4 would be off by hundreds of units."""
    x = (torch.randn(6, 1000) * 0.5 + 4).to(dtype)
    out = torch.empty(6, dtype=dtype)
    half_row_sum_kernel[(6,)](x, out, 1000, BLOCK=1024)
    assert _ulps(out, x.double().sum(1)).max() <= 1


@triton.jit
def gemv_kernel(y_ptr, a_ptr, x_ptr, m, n, stride_am, BM: tl.constexpr, BN: tl.constexpr):
    """triton-cpu's bf16 GEMV tutorial, masked for ragged sizes."""
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.arange(0, BN)
    acc = tl.zeros((BM,), dtype=tl.float32)
    for start in range(0, n, BN):
        cols = start + rn
        a = tl.load(a_ptr + rm[:, None] * stride_am + cols[None, :], mask=(rm[:, None] < m) & (cols[None, :] < n),
                    other=0.0)
        x = tl.load(x_ptr + cols, mask=cols < n, other=0.0)
        acc += tl.sum(a * x[None, :], axis=1)
    tl.store(y_ptr + rm, acc.to(tl.bfloat16), mask=rm < m)


def _gemv(a, x, **options):
    m, n = a.shape
    y = torch.empty(m, dtype=a.dtype)
    gemv_kernel[(triton.cdiv(m, 16),)](y, a, x, m, n, a.stride(0), BM=16, BN=64, **options)
    return y


def test_a_bf16_gemv_gives_torchs_results(target):
    """The products fuse into the fp32 sum unrounded and the sum joins the fp32 accumulator unrounded, as
    fp fusion (on by default) allows: torch's bf16 GEMV, which accumulates in fp32, gives the same bf16."""
    a, x = torch.randn(37, 200, dtype=torch.bfloat16), torch.randn(200, dtype=torch.bfloat16)
    y = _gemv(a, x)
    assert _ulps(y, a.double() @ x.double()).max() <= 1
    assert (y == torch.mv(a, x)).float().mean() >= 0.97


def test_without_fp_fusion_a_bf16_gemv_keeps_every_rounding(target):
    """enable_fp_fusion=False: each product rounded to bf16, each block's sum too, as the types say."""
    a, x = torch.randn(37, 200, dtype=torch.bfloat16), torch.randn(200, dtype=torch.bfloat16)
    y = _gemv(a, x, enable_fp_fusion=False)
    products = (a * x).float()     # torch rounds each product to bf16
    blocks = [products[:, s:s + 64].sum(1).to(torch.bfloat16).float() for s in range(0, 200, 64)]
    expected = torch.stack(blocks).sum(0).to(torch.bfloat16)
    assert (y.float() - expected.float()).abs().max() <= 2 * torch.finfo(torch.bfloat16).eps * expected.abs().max()
    assert not torch.equal(y, _gemv(a, x))
