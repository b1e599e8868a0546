"""triton's own float ops: tl.clamp (tt.clampf, both NaN modes), div_rn and sqrt_rn (tt.precise_divf and
tt.precise_sqrt, correctly rounded)."""
import pytest
import torch
import triton
import triton.language as tl


@triton.jit
def clamp_kernel(x_ptr, lo_ptr, hi_ptr, out_ptr, n, PROPAGATE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    lo = tl.load(lo_ptr + offs, mask=mask)
    hi = tl.load(hi_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.clamp(x, lo, hi, propagate_nan=PROPAGATE), mask=mask)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("propagate", ["NONE", "ALL"])
def test_clamp(target, dtype, propagate):
    n = 100
    x = torch.randn(n, dtype=dtype) * 3
    x[::7] = float("nan")
    a, b = torch.randn(n, dtype=dtype), torch.randn(n, dtype=dtype)
    lo, hi = torch.minimum(a, b), torch.maximum(a, b)
    out = torch.empty_like(x)
    clamp_kernel[(2,)](x, lo, hi, out, n, getattr(tl.PropagateNan, propagate), BLOCK=64)
    expected = torch.minimum(torch.maximum(x, lo), hi)          # propagates NaN
    if propagate == "NONE":
        expected = torch.where(torch.isnan(x), lo, expected)     # maxnum(NaN, lo) = lo
    torch.testing.assert_close(out, expected, equal_nan=True, rtol=0, atol=0)


@triton.jit
def clamp_scalar_bounds_kernel(x_ptr, out_ptr, lo, hi, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.clamp(tl.load(x_ptr + offs), lo, hi))


def test_clamp_with_scalar_bounds(target):
    x = torch.randn(32) * 4
    out = torch.empty_like(x)
    clamp_scalar_bounds_kernel[(1,)](x, out, -1.5, 2.0, BLOCK=32)
    torch.testing.assert_close(out, x.clamp(-1.5, 2.0), rtol=0, atol=0)


@triton.jit
def precise_kernel(x_ptr, y_ptr, div_ptr, sqrt_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    y = tl.load(y_ptr + offs)
    tl.store(div_ptr + offs, tl.math.div_rn(x, y))
    tl.store(sqrt_ptr + offs, tl.math.sqrt_rn(x))


def test_div_rn_and_sqrt_rn_are_correctly_rounded(target):
    n = 1024
    x = torch.rand(n) * 1e3
    x[:4] = torch.tensor([0.0, float("inf"), 2.0, 1e-40])     # a subnormal too
    y = torch.randn(n)
    div, sqrt = torch.empty(n), torch.empty(n)
    precise_kernel[(1,)](x, y, div, sqrt, BLOCK=n)
    # Rounding the float64 result once is exact for these (53 >= 2 * 24 + 2).
    torch.testing.assert_close(div, (x.double() / y.double()).float(), rtol=0, atol=0)
    torch.testing.assert_close(sqrt, x.double().sqrt().float(), rtol=0, atol=0)


@triton.jit
def precise_splat_kernel(out_ptr, a, b, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    ones = tl.full((BLOCK,), 1.0, tl.float32)
    tl.store(out_ptr + offs, tl.math.div_rn(ones * a, ones * b) + tl.math.sqrt_rn(ones * a))


def test_precise_ops_on_splats(target):
    out = torch.empty(16)
    precise_splat_kernel[(1,)](out, 2.0, 3.0, BLOCK=16)
    expected = torch.tensor(2.0 / 3.0, dtype=torch.float64).float() + torch.tensor(2.0).sqrt()
    torch.testing.assert_close(out, expected.expand(16), rtol=0, atol=0)
