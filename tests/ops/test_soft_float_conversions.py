"""Conversions that some CPUs have no instruction for (LLVM calls compiler-rt, or Spine lowers them to
integer code): every pair among f64, f32, f16, bf16 and 64-bit integers, against torch."""
import pytest
import torch
import triton
import triton.language as tl


@triton.jit
def convert_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask).to(out_ptr.dtype.element_ty), mask=mask)


def _source(dtype, n=300):
    g = torch.Generator().manual_seed(1)
    if dtype.is_floating_point:
        x = torch.randn(n, generator=g, dtype=torch.float64) * 1000
        x[:4] = torch.tensor([0.0, -0.0, float("inf"), float("-inf")], dtype=torch.float64)
        return x.to(dtype)
    return torch.randint(-2**40, 2**40, (n,), generator=g, dtype=torch.int64).to(dtype)


PAIRS = [(torch.float64, torch.bfloat16), (torch.float64, torch.float16), (torch.bfloat16, torch.float64),
         (torch.float16, torch.float64), (torch.int64, torch.bfloat16), (torch.int64, torch.float16),
         (torch.bfloat16, torch.int64), (torch.float16, torch.int64), (torch.bfloat16, torch.float16),
         (torch.float16, torch.bfloat16)]


@pytest.mark.parametrize("src,dst", PAIRS, ids=[f"{a}-{b}".replace("torch.", "") for a, b in PAIRS])
def test_conversion_matches_torch(target, src, dst):
    x = _source(src)
    if not dst.is_floating_point:
        x = torch.where(torch.isfinite(x), x, torch.zeros_like(x))  # float → int of ±inf is undefined
    out = torch.empty(x.shape, dtype=dst)
    convert_kernel[(triton.cdiv(x.numel(), 128),)](x, out, x.numel(), BLOCK=128)
    torch.testing.assert_close(out, x.to(dst), rtol=0, atol=0, equal_nan=True)


@triton.jit
def scaled_to_half_kernel(x_ptr, out_ptr, n, SHIFT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    # Shifted left, x has few significant bits but may lie far outside half's range.
    v = tl.load(x_ptr + offs, mask=mask) << SHIFT
    tl.store(out_ptr + offs, v.to(tl.float16).to(tl.float32), mask=mask)


@pytest.mark.parametrize("dtype,shift", [(torch.int32, 31), (torch.int32, 16), (torch.int32, 9),
                                         (torch.int64, 40), (torch.uint32, 31)],
                         ids=["i32<<31", "i32<<16", "i32<<9", "i64<<40", "u32<<31"])
def test_integer_to_half_overflows_to_infinity(target, dtype, shift):
    """Integers of few significant bits outside half's range become ±inf through f16, as in torch,
    not the integer itself (what folding the two casts into one would give)."""
    x = torch.arange(-150, 150, dtype=torch.int64)
    if dtype == torch.uint32:
        x = x.abs()
    x = x.to(dtype)
    out = torch.empty(x.shape, dtype=torch.float32)
    scaled_to_half_kernel[(triton.cdiv(x.numel(), 64),)](x, out, x.numel(), SHIFT=shift, BLOCK=64)
    wide = x.to(torch.int64) << shift
    if dtype == torch.int32:
        wide = ((wide + 2**31) % 2**32) - 2**31          # the kernel's shift wraps in 32 bits
    elif dtype == torch.uint32:
        wide = wide % 2**32
    expected = wide.to(torch.float64).to(torch.float16).to(torch.float32)
    assert torch.isinf(expected).any() and torch.isfinite(expected).any()
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
