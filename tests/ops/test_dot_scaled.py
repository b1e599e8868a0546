"""tl.dot_scaled (to_linalg/dot_scaled.py) against a torch reference that decodes the operands, applies the
e8m0 scales in the compute type (bf16, or f16 when an operand is fp16, as triton defines the op) and
multiplies in float64."""
import itertools

import pytest
import torch
import triton
import triton.language as tl

FORMATS = ("e2m1", "e4m3", "e5m2", "bf16", "fp16")
SCALED = ("e2m1", "e4m3", "e5m2")        # the microscaled formats: each gets scales here


@triton.jit
def dot_scaled_kernel(a_ptr, a_scale_ptr, b_ptr, b_scale_ptr, c_ptr, M, N, K, A_FORMAT: tl.constexpr,
                      B_FORMAT: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                      A_K_PACK: tl.constexpr, B_K_PACK: tl.constexpr, FAST_MATH: tl.constexpr):
    """c = a @ b over a loop along k; a is stored [M / pm, K / pk] and b [K / pk, N / pn], where an e2m1
    operand holds two values per byte along k (pk = 2) or, without k-packing, along m or n."""
    A_PK: tl.constexpr = 2 if A_FORMAT == "e2m1" and A_K_PACK else 1
    A_PM: tl.constexpr = 2 if A_FORMAT == "e2m1" and not A_K_PACK else 1
    B_PK: tl.constexpr = 2 if B_FORMAT == "e2m1" and B_K_PACK else 1
    B_PN: tl.constexpr = 2 if B_FORMAT == "e2m1" and not B_K_PACK else 1
    GROUPS: tl.constexpr = BK // 32
    am = tl.program_id(0) * (BM // A_PM) + tl.arange(0, BM // A_PM)
    bn = tl.program_id(1) * (BN // B_PN) + tl.arange(0, BN // B_PN)
    ak = tl.arange(0, BK // A_PK)
    bk = tl.arange(0, BK // B_PK)
    a_ptrs = a_ptr + am[:, None] * (K // A_PK) + ak[None, :]
    b_ptrs = b_ptr + bk[:, None] * (N // B_PN) + bn[None, :]
    sm = tl.program_id(0) * BM + tl.arange(0, BM)
    sn = tl.program_id(1) * BN + tl.arange(0, BN)
    sg = tl.arange(0, GROUPS)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K // BK):
        a = tl.load(a_ptrs, mask=am[:, None] < M // A_PM, other=0)
        b = tl.load(b_ptrs, mask=bn[None, :] < N // B_PN, other=0)
        a_scale = None
        b_scale = None
        if a_scale_ptr is not None:
            a_scale = tl.load(a_scale_ptr + sm[:, None] * (K // 32) + k * GROUPS + sg[None, :],
                              mask=sm[:, None] < M, other=127)
        if b_scale_ptr is not None:
            b_scale = tl.load(b_scale_ptr + sn[:, None] * (K // 32) + k * GROUPS + sg[None, :],
                              mask=sn[:, None] < N, other=127)
        acc = tl.dot_scaled(a, a_scale, A_FORMAT, b, b_scale, B_FORMAT, acc, fast_math=FAST_MATH,
                            lhs_k_pack=A_K_PACK, rhs_k_pack=B_K_PACK)
        a_ptrs += BK // A_PK
        b_ptrs += (BK // B_PK) * (N // B_PN)
    cm = tl.program_id(0) * BM + tl.arange(0, BM)
    tl.store(c_ptr + cm[:, None] * N + sn[None, :], acc, mask=(cm[:, None] < M) & (sn[None, :] < N))


# ------------------------------------------------------------------------------------------- reference

FP4_MAGNITUDES = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=torch.float64)
TORCH_TYPES = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2, "bf16": torch.bfloat16,
               "fp16": torch.float16}


def compute_type(a_format, b_format):
    return torch.float16 if "fp16" in (a_format, b_format) else torch.bfloat16


def unpacked_fp4(packed, dim):
    """Two e2m1 values per byte, the first in the low nibble, placed next to each other along `dim`."""
    codes = torch.stack([packed & 0xF, packed >> 4], dim=dim + 1).flatten(dim, dim + 1).long()
    magnitude = FP4_MAGNITUDES[codes & 7]
    return torch.where(codes & 8 != 0, -magnitude, magnitude)


def values(x, fmt, packed_dim, dtype):
    if fmt == "e2m1":
        return unpacked_fp4(x, packed_dim).to(dtype)
    if x.dtype == torch.uint8:
        x = x.view(TORCH_TYPES[fmt])
    return x.to(dtype)


def scaled(v, scale, fast_math):
    """v * 2^(scale - 127) rounded to v's type, scale [rows of v, k / 32] along v's last dimension. The factor
    is built from the exponent bits, as triton builds it: scale 0 is 0, 0xFF infinity (and NaN, unless
    fast_math)."""
    factor = (scale.to(torch.int32) << 23).view(torch.float32).to(v.dtype).repeat_interleave(32, dim=1)
    product = v * factor
    if fast_math:
        return product
    return torch.where(scale.repeat_interleave(32, dim=1) == 0xFF, torch.nan, product)


def reference(a, a_scale, a_format, a_dim, b, b_scale, b_format, b_dim, fast_math=False):
    """(a @ b in float64 of the scaled compute-type values, and the sum of the products' magnitudes)."""
    dtype = compute_type(a_format, b_format)
    va = values(a, a_format, a_dim, dtype)
    vb = values(b, b_format, b_dim, dtype)
    if a_scale is not None:
        va = scaled(va, a_scale, fast_math)
    if b_scale is not None:
        vb = scaled(vb.T, b_scale, fast_math).T
    va, vb = va.double(), vb.double()
    return va @ vb, va.abs() @ vb.abs()


def assert_matches(c, expected, magnitude, rtol=3e-5):
    """Equal to float64 within fp32 accumulation error (relative to the summed magnitudes), NaN and inf
    where the reference has them."""
    c = c.double()
    finite = torch.isfinite(expected)
    assert torch.equal(torch.isnan(c), torch.isnan(expected))
    assert torch.equal(c[~finite & ~torch.isnan(c)], expected[~finite & ~torch.isnan(expected)])
    error = (c - expected).abs()[finite]
    assert (error <= rtol * magnitude[finite] + 1e-30).all(), f"max error {error.max()}"


# ------------------------------------------------------------------------------------------------ data

def random_operand(fmt, shape):
    if fmt in ("bf16", "fp16"):
        return torch.randn(shape).to(TORCH_TYPES[fmt])
    return torch.randint(0, 256, shape, dtype=torch.uint8)


def random_scales(rows, k, low=117, high=138):
    return torch.randint(low, high, (rows, k // 32), dtype=torch.uint8)


def run(a_format, b_format, m, n, k, bm, bn, bk, a_k_pack=True, b_k_pack=True, scales=None, fast_math=False):
    """Random operands (and scales for the microscaled formats, unless given), the kernel's c and the
    reference."""
    a_shape = (m // (1 if a_k_pack or a_format != "e2m1" else 2), k // (2 if a_k_pack and a_format == "e2m1" else 1))
    b_shape = (k // (2 if b_k_pack and b_format == "e2m1" else 1), n // (1 if b_k_pack or b_format != "e2m1" else 2))
    a, b = random_operand(a_format, a_shape), random_operand(b_format, b_shape)
    a_scale, b_scale = scales if scales is not None else (
        random_scales(m, k) if a_format in SCALED else None, random_scales(n, k) if b_format in SCALED else None)
    c = torch.empty(m, n)
    dot_scaled_kernel[(triton.cdiv(m, bm), triton.cdiv(n, bn))](
        a, a_scale, b, b_scale, c, m, n, k, a_format, b_format, BM=bm, BN=bn, BK=bk, A_K_PACK=a_k_pack,
        B_K_PACK=b_k_pack, FAST_MATH=fast_math)
    expected = reference(a, a_scale, a_format, 1 if a_k_pack else 0, b, b_scale, b_format,
                         0 if b_k_pack else 1, fast_math)
    return c, expected


# ------------------------------------------------------------------------------------------------ tests

@pytest.mark.parametrize("a_format,b_format", list(itertools.product(FORMATS, FORMATS)))
def test_formats(target, a_format, b_format):
    # Two blocks of rows, columns and k on the host (m and n ragged); one 32 x 32 x 64 block under QEMU.
    shape = (40, 48, 192, 32, 32, 64) if target == "host" else (32, 32, 64, 32, 32, 64)
    c, (expected, magnitude) = run(a_format, b_format, *shape)
    assert_matches(c, expected, magnitude)


@pytest.mark.parametrize("a_k_pack,b_k_pack", [(False, True), (True, False), (False, False)])
def test_fp4_packed_along_m_or_n(target, a_k_pack, b_k_pack):
    c, (expected, magnitude) = run("e2m1", "e2m1", 32, 32, 64, 32, 32, 64, a_k_pack=a_k_pack, b_k_pack=b_k_pack)
    assert_matches(c, expected, magnitude)


@pytest.mark.parametrize("fast_math", [False, True])
def test_zero_and_nan_scales(target, fast_math):
    # A scale of 0 makes its values 0; 0xFF makes them NaN, or under fast_math infinities (NaN for zeros).
    a_scale = random_scales(32, 64)
    b_scale = random_scales(32, 64)
    a_scale[3, 1] = 0
    a_scale[5, 0] = 0xFF
    b_scale[7, 1] = 0xFF
    c, (expected, magnitude) = run("e4m3", "e2m1", 32, 32, 64, 32, 32, 64, scales=(a_scale, b_scale),
                                   fast_math=fast_math)
    assert torch.isnan(expected[5]).all() and torch.isnan(expected[:, 7]).all()
    assert_matches(c, expected, magnitude)


def test_scales_on_one_side_only(target):
    b_scale = random_scales(32, 64)
    c, (expected, magnitude) = run("e5m2", "e4m3", 32, 32, 64, 32, 32, 64, scales=(None, b_scale))
    assert_matches(c, expected, magnitude)


@triton.jit
def fixed_operands_kernel(a_ptr, a_scale_ptr, b_ptr, b_scale_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr,
                          K: tl.constexpr, REPEAT: tl.constexpr):
    """The same scaled dot accumulated REPEAT times in a loop, its operands loaded before the loop."""
    rm = tl.arange(0, M)
    rn = tl.arange(0, N)
    rg = tl.arange(0, K // 32)
    a = tl.load(a_ptr + rm[:, None] * K + tl.arange(0, K)[None, :])
    b = tl.load(b_ptr + tl.arange(0, K // 2)[:, None] * N + rn[None, :])
    a_scale = tl.load(a_scale_ptr + rm[:, None] * (K // 32) + rg[None, :])
    b_scale = tl.load(b_scale_ptr + rn[:, None] * (K // 32) + rg[None, :])
    acc = tl.zeros((M, N), dtype=tl.float32)
    for _ in range(REPEAT):
        acc = tl.dot_scaled(a, a_scale, "e5m2", b, b_scale, "e2m1", acc)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)


def test_operands_fixed_across_the_loop(target):
    a = torch.randint(0, 256, (32, 64), dtype=torch.uint8)
    b = torch.randint(0, 256, (32, 32), dtype=torch.uint8)
    a_scale, b_scale = random_scales(32, 64), random_scales(32, 64)
    c = torch.empty(32, 32)
    fixed_operands_kernel[(1,)](a, a_scale, b, b_scale, c, M=32, N=32, K=64, REPEAT=2)
    expected, magnitude = reference(a, a_scale, "e5m2", 1, b, b_scale, "e2m1", 0)
    assert_matches(c, 2 * expected, 2 * magnitude)


@triton.jit
def batched_kernel(a_ptr, b_ptr, c_ptr, B: tl.constexpr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    """A 3-D dot_scaled (without scales: triton takes only 2-D ones) of e2m1 a [B, M, K / 2] and bf16 b."""
    rb = tl.arange(0, B)[:, None, None]
    rm = tl.arange(0, M)[None, :, None]
    rn = tl.arange(0, N)[None, None, :]
    a = tl.load(a_ptr + rb * M * (K // 2) + rm * (K // 2) + tl.arange(0, K // 2)[None, None, :])
    b = tl.load(b_ptr + rb * K * N + tl.arange(0, K)[None, :, None] * N + rn)
    tl.store(c_ptr + rb * M * N + rm * N + rn, tl.dot_scaled(a, None, "e2m1", b, None, "bf16"))


def test_batched(target):
    a = torch.randint(0, 256, (2, 16, 32), dtype=torch.uint8)
    b = torch.randn(2, 64, 16).to(torch.bfloat16)
    c = torch.empty(2, 16, 16)
    batched_kernel[(1,)](a, b, c, B=2, M=16, N=16, K=64)
    va, vb = values(a, "e2m1", 2, torch.bfloat16).double(), b.double()
    assert_matches(c, va @ vb, va.abs() @ vb.abs())
