"""fp8 storage, conversions (triton's semantics: round to nearest even or toward zero, saturating, NaN kept)
and fp8 dot operands, for all five formats (to_linalg/fp8.py), against a reference written from each
format's definition (cross-checked with torch's own fp8 dtypes where torch has them)."""
import math

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

# triton dtype → (exponent bits, mantissa bits, bias, specials), as to_linalg/fp8.py documents them
FORMATS = {
    "fp8e5": (5, 2, 15, "ieee"),
    "fp8e4nv": (4, 3, 7, "fn"),
    "fp8e4b15": (4, 3, 15, "fn"),
    "fp8e4b8": (4, 3, 8, "fnuz"),
    "fp8e5b16": (5, 2, 16, "fnuz"),
}
TL = {"fp8e5": tl.float8e5, "fp8e4nv": tl.float8e4nv, "fp8e4b15": tl.float8e4b15, "fp8e4b8": tl.float8e4b8,
      "fp8e5b16": tl.float8e5b16}
TORCH = {"fp8e5": torch.float8_e5m2, "fp8e4nv": torch.float8_e4m3fn, "fp8e4b8": torch.float8_e4m3fnuz,
         "fp8e5b16": torch.float8_e5m2fnuz}


def reference_value(code: int, name: str) -> float:
    e_bits, m_bits, bias, specials = FORMATS[name]
    sign = -1.0 if code & 0x80 else 1.0
    exponent = (code >> m_bits) & ((1 << e_bits) - 1)
    mantissa = code & ((1 << m_bits) - 1)
    if specials == "ieee" and exponent == (1 << e_bits) - 1:
        return sign * math.inf if mantissa == 0 else math.nan
    if specials == "fn" and code & 0x7F == 0x7F:
        return math.nan
    if specials == "fnuz" and code == 0x80:
        return math.nan
    if exponent == 0:
        return sign * mantissa * 2.0 ** (1 - bias - m_bits)
    return sign * (1 + mantissa / 2 ** m_bits) * 2.0 ** (exponent - bias)


def reference_encode(values: np.ndarray, name: str, toward_zero: bool) -> np.ndarray:
    """Round each value to the format: nearest (ties to an even code) or toward zero; saturate; NaN → NaN."""
    codes = [c for c in range(128) if math.isfinite(reference_value(c, name))]
    magnitudes = np.array([reference_value(c, name) for c in codes])
    nan_code = 0x80 if FORMATS[name][3] == "fnuz" else 0x7F
    out = []
    for v in values.astype(np.float64):
        if math.isnan(v):
            out.append(nan_code)
            continue
        a = min(abs(v), magnitudes.max())
        below = int(np.searchsorted(magnitudes, a, side="right")) - 1
        code = codes[below]
        if not toward_zero and magnitudes[below] != a:
            above = codes[below + 1]
            d_low, d_high = a - magnitudes[below], magnitudes[below + 1] - a
            if d_high < d_low or (d_high == d_low and above % 2 == 0):
                code = above
        if math.copysign(1.0, v) < 0 and not (code == 0 and FORMATS[name][3] == "fnuz"):
            code |= 0x80
        out.append(code)
    return np.array(out, dtype=np.uint8)


def same_codes(got: torch.Tensor, expected: np.ndarray, name: str) -> None:
    got = got.view(torch.uint8).numpy()
    # NaN codes may differ in sign for the IEEE-like formats; compare NaN-ness there.
    got_nan = np.isnan([reference_value(int(c), name) for c in got])
    exp_nan = np.isnan([reference_value(int(c), name) for c in expected])
    assert np.array_equal(got_nan, exp_nan)
    mismatch = (got != expected) & ~exp_nan
    assert not mismatch.any(), f"{mismatch.sum()} codes differ, first at {np.argmax(mismatch)}"


@triton.jit
def convert_kernel(src_ptr, dst_ptr, n, ROUNDING: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(src_ptr + offs, mask=mask)
    tl.store(dst_ptr + offs, x.to(dst_ptr.dtype.element_ty, fp_downcast_rounding=ROUNDING), mask=mask)


def convert(src, dst, rounding=None):
    n = dst.numel() if hasattr(dst, "numel") else dst.base.numel()
    convert_kernel[(triton.cdiv(n, 256),)](src, dst, n, rounding, BLOCK=256)
    return dst


@pytest.mark.parametrize("name", list(FORMATS))
def test_every_code_upcasts_exactly(target, name):
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(torch.int8)
    expected = torch.tensor([reference_value(c, name) for c in range(256)], dtype=torch.float32)
    out = convert(triton.reinterpret(codes, TL[name]), torch.empty(256))
    torch.testing.assert_close(out, expected, equal_nan=True, rtol=0, atol=0)
    # to the narrower floats too (exact: every fp8 value is representable there)
    for dtype in (torch.float16, torch.bfloat16, torch.float64):
        narrow = convert(triton.reinterpret(codes, TL[name]), torch.empty(256, dtype=dtype))
        torch.testing.assert_close(narrow, expected.to(dtype), equal_nan=True, rtol=0, atol=0)


def downcast_inputs(name: str) -> torch.Tensor:
    """Every code's value, the midpoints between neighbours (ties), values just off them, values beyond
    the range and in the subnormal range, infinities and NaN."""
    finite = sorted({reference_value(c, name) for c in range(256)} - {math.nan}, key=float)
    finite = [v for v in finite if math.isfinite(v)]
    mids = [(a + b) / 2 for a, b in zip(finite, finite[1:])]
    values = finite + mids + [m * (1 + 2 ** -20) for m in mids] + [m * (1 - 2 ** -20) for m in mids]
    top = max(finite)
    values += [top * 1.01, top * 1.2, -top * 3, 1e30, -1e30, math.inf, -math.inf, math.nan, 1e-30, -1e-30,
               0.0, -0.0]
    torch.manual_seed(1)
    values += (torch.randn(2000) * top / 8).tolist()
    return torch.tensor(values, dtype=torch.float32)


@pytest.mark.parametrize("name", list(FORMATS))
@pytest.mark.parametrize("rounding", ["rtne", "rtz"])
def test_downcast_from_float32(target, name, rounding):
    x = downcast_inputs(name)
    out = triton.reinterpret(torch.empty(x.numel(), dtype=torch.int8), TL[name])
    convert(x, out, rounding)
    same_codes(out.base, reference_encode(x.numpy(), name, rounding == "rtz"), name)


def test_reference_agrees_with_torch():
    # torch rounds to nearest even without saturating: the two agree on values inside the range.
    for name, dtype in TORCH.items():
        x = downcast_inputs(name)
        inside = x.abs() <= max(v for v in (reference_value(c, name) for c in range(128)) if math.isfinite(v))
        x = x[inside & ~x.isnan()]
        expected = reference_encode(x.numpy(), name, toward_zero=False)
        got = x.to(dtype).view(torch.uint8).numpy()
        if name in ("fp8e4b8", "fp8e5b16"):
            got = np.where(got == 0x80, 0, got)      # torch keeps no negative zero either, but check anyway
        assert np.array_equal(got, expected), name


@pytest.mark.parametrize("source", [torch.float16, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("name", ["fp8e5", "fp8e4nv", "fp8e5b16"])
def test_downcast_from_other_floats(target, source, name):
    x = downcast_inputs(name).to(source)
    out = triton.reinterpret(torch.empty(x.numel(), dtype=torch.int8), TL[name])
    convert(x, out)
    same_codes(out.base, reference_encode(x.double().numpy(), name, toward_zero=False), name)


def test_float64_to_fp8_rounds_once(target):
    # Just above a tie in float64 but exactly the tie in float32: a double rounding would round to even.
    tie = 1.0 + 2 ** -3          # halfway between fp8e5's 1.0 and 1.25
    x = torch.tensor([tie + 2 ** -40, tie - 2 ** -40], dtype=torch.float64)
    out = convert(x, torch.empty(2, dtype=torch.float8_e5m2))
    assert out.float().tolist() == [1.25, 1.0]


@triton.jit
def fp8_arith_kernel(a_ptr, b_ptr, out_ptr, BLOCK: tl.constexpr):
    # Arithmetic and comparisons on fp8 values, an fp8 constant, a masked load with an fp8 `other`.
    offs = tl.arange(0, BLOCK)
    a = tl.load(a_ptr + offs)
    b = tl.load(b_ptr + offs, mask=offs < BLOCK // 2, other=1.5)
    bigger = tl.maximum(a, b)
    s = a + b + tl.zeros((BLOCK,), a.dtype) + tl.full((BLOCK,), 0.5, tl.float32).to(a.dtype)
    picked = tl.where(a > b, tl.abs(a), s)
    tl.store(out_ptr + offs, picked)
    tl.store(out_ptr + BLOCK + offs, bigger)


@pytest.mark.parametrize("name", ["fp8e5", "fp8e4nv"])
def test_fp8_arithmetic(target, name):
    block = 16
    torch.manual_seed(0)
    a = torch.randn(block).to(TORCH[name])
    b = torch.randn(block).to(TORCH[name])
    out = torch.empty(2 * block, dtype=TORCH[name])
    fp8_arith_kernel[(1,)](a, b, out, BLOCK=block)
    af, bf = a.float(), b.float()
    bf[block // 2:] = 1.5
    rnd = lambda t: t.to(TORCH[name]).float()     # each op rounds its f32 result back to fp8
    s = rnd(rnd(rnd(af + bf) + 0.0) + 0.5)
    torch.testing.assert_close(out[:block].float(), torch.where(af > bf, af.abs(), s), rtol=0, atol=0)
    torch.testing.assert_close(out[block:].float(), torch.maximum(af, bf), rtol=0, atol=0)


@triton.jit
def fp8_dot_kernel(a_ptr, b_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    rm, rn, rk = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], tl.dot(a, b))


@pytest.mark.parametrize("name", ["fp8e5", "fp8e4nv", "fp8e4b15"])
def test_fp8_dot(target, name):
    m, n, k = 16, 16, 32
    rs = np.random.RandomState(0)
    a_codes = torch.from_numpy(rs.randint(20, 40, (m, k)).astype(np.int8))   # triton's tests' fp8 values
    b_codes = torch.from_numpy(rs.randint(20, 40, (k, n)).astype(np.int8))
    c = torch.empty(m, n)
    fp8_dot_kernel[(1,)](triton.reinterpret(a_codes, TL[name]), triton.reinterpret(b_codes, TL[name]), c,
                         M=m, N=n, K=k)
    decode = lambda codes: torch.tensor([[reference_value(int(v) & 0xFF, name) for v in row] for row in codes])
    torch.testing.assert_close(c, decode(a_codes.tolist()) @ decode(b_codes.tolist()), rtol=1e-6, atol=1e-6)


def test_fp8_e4b15_through_custom_conversion(target):
    # fp8e4b15 casts go through the backend's convert_custom_types; 1.75 is its largest value.
    x = torch.tensor([0.1, -1.0, 1.75, 3.0, -100.0, float("nan")])
    out = triton.reinterpret(torch.empty(6, dtype=torch.int8), tl.float8e4b15)
    convert(x, out)
    back = convert(out, torch.empty(6))
    expected = [reference_value(int(c), "fp8e4b15") for c in reference_encode(x.numpy(), "fp8e4b15", False)]
    torch.testing.assert_close(back, torch.tensor(expected), equal_nan=True, rtol=0, atol=0)


@pytest.mark.parametrize("dtype,rounding", [(torch.float16, "rtz"), (torch.bfloat16, "rtz"),
                                            (torch.float16, "rtne")])
def test_float32_downcast_with_rounding_mode(target, dtype, rounding):
    torch.manual_seed(0)
    x = torch.cat([torch.randn(500) * 1000, torch.tensor([7e4, -7e4, 1e-7, float("inf"), float("nan")])])
    out = convert(x, torch.empty(x.numel(), dtype=dtype), rounding)
    if rounding == "rtne":
        expected = x.to(dtype)
    else:   # toward zero: the neighbour of the nearest whose magnitude is not above the input's
        nearest = x.to(dtype)
        away = nearest.double().abs() > x.double().abs()
        step = torch.tensor(1, dtype=torch.int16)
        expected = torch.where(away, (nearest.view(torch.int16) - step).view(dtype), nearest)
    torch.testing.assert_close(out, expected, equal_nan=True, rtol=0, atol=0)
