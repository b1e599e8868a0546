import pytest
import torch
import triton
import triton.language as tl

from tests.kernels import cast_kernel, elementwise_math_kernel, gather_kernel, int_arith_kernel, scalar_kernel

REFERENCES = {
    "exp": lambda x, s: x.exp(),
    "log": lambda x, s: (x.abs() + 1).log(),
    "sqrt": lambda x, s: x.abs().sqrt(),
    "abs": lambda x, s: x.abs(),
    "max": lambda x, s: x.clamp(min=s),
    "min": lambda x, s: x.clamp(max=s),
    "where": lambda x, s: torch.where(x > s, x, -x),
    "erf": lambda x, s: torch.erf(x),
    "scale": lambda x, s: x * s,
}


@pytest.mark.parametrize("op", sorted(REFERENCES))
def test_math(target, op):
    x = torch.randn(300)
    out = torch.empty(300)
    elementwise_math_kernel[(3,)](x, out, 300, 0.5, BLOCK=128, OP=op)
    torch.testing.assert_close(out, REFERENCES[op](x, 0.5), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_integer_arith_with_scalar_argument(target, dtype):
    a = torch.randint(-1000, 1000, (300,), dtype=dtype)
    b = torch.randint(1, 1000, (300,), dtype=dtype)
    out = torch.empty_like(a)
    int_arith_kernel[(3,)](a, b, out, 300, 7, BLOCK=128)
    torch.testing.assert_close(out, torch.maximum(a * 7 + b, a - b))


def test_scalar_argument_specialised_to_one(target):
    # triton compiles integer arguments equal to 1 as constants: the launcher must drop them.
    a = torch.randint(-1000, 1000, (300,), dtype=torch.int32)
    b = torch.randint(1, 1000, (300,), dtype=torch.int32)
    out = torch.empty_like(a)
    int_arith_kernel[(3,)](a, b, out, 300, 1, BLOCK=128)
    torch.testing.assert_close(out, torch.maximum(a + b, a - b))


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_casts(target, dtype):
    x = torch.randn(300).to(dtype)
    out = torch.empty(300, dtype=dtype)
    cast_kernel[(3,)](x, out, 300, BLOCK=128)
    torch.testing.assert_close(out, (x.float() * 2).to(dtype))


def test_gather_through_loaded_indices(target):
    x = torch.randn(300)
    idx = torch.randint(0, 300, (300,), dtype=torch.int32)
    out = torch.empty(300)
    gather_kernel[(3,)](x, idx, out, 300, BLOCK=128)
    torch.testing.assert_close(out, x[idx.long()])


def test_scalar_loads_and_float_argument(target):
    x = torch.randn(5)
    out = torch.empty(5)
    scalar_kernel[(5,)](x, out, 2.5)
    torch.testing.assert_close(out, x + 2.5)


@triton.jit
def add_scalar_kernel(x_ptr, out_ptr, n, k, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + k, mask=mask)


def test_int64_scalar_beyond_int32(target):
    x = torch.randint(-5, 5, (100,), dtype=torch.int64)
    out = torch.empty_like(x)
    add_scalar_kernel[(1,)](x, out, 100, 3 << 40, BLOCK=128)
    torch.testing.assert_close(out, x + (3 << 40))


def test_bfloat16(target):
    x = torch.randn(100).to(torch.bfloat16)
    out = torch.empty_like(x)
    add_scalar_kernel[(1,)](x, out, 100, 1.5, BLOCK=128)
    torch.testing.assert_close(out, (x.float() + 1.5).to(torch.bfloat16))


@triton.jit
def select_by_flag_kernel(flag_ptr, a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    flag = tl.load(flag_ptr + offs, mask=mask, other=0)
    a = tl.load(a_ptr + offs, mask=mask)
    b = tl.load(b_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.where(flag, a, b), mask=mask)


def test_bool_tensor_argument(target):
    flag = torch.rand(150) > 0.5
    a, b = torch.randn(150), torch.randn(150)
    out = torch.empty(150)
    select_by_flag_kernel[(2,)](flag, a, b, out, 150, BLOCK=128)
    torch.testing.assert_close(out, torch.where(flag, a, b))


@triton.jit
def umulhi_kernel(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(a_ptr + offs, mask=mask)
    b = tl.load(b_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.umulhi(a, b), mask=mask)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_umulhi(target, dtype):
    bits = torch.iinfo(dtype).bits
    a = torch.randint(torch.iinfo(dtype).min, torch.iinfo(dtype).max, (100,), dtype=dtype)
    b = torch.randint(torch.iinfo(dtype).min, torch.iinfo(dtype).max, (100,), dtype=dtype)
    out = torch.empty_like(a)
    umulhi_kernel[(2,)](a, b, out, 100, BLOCK=64)
    # the high half of the unsigned product of the bit patterns, as the signed type
    mod = 1 << bits
    high = [((int(x) % mod) * (int(y) % mod)) >> bits for x, y in zip(a, b)]
    expected = torch.tensor([h - mod if h >= mod // 2 else h for h in high], dtype=dtype)
    assert torch.equal(out, expected)


@triton.jit
def unary_kernel(x_ptr, out_ptr, n, OP: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    if OP == "ceil":
        y = tl.ceil(x)
    elif OP == "exp2":
        y = tl.exp2(x)
    else:
        y = x.to(out_ptr.dtype.element_ty)
    tl.store(out_ptr + offs, y, mask=mask)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_ceil_of_large_and_special_values(target, dtype):
    x = torch.tensor([1e30, -1e30, 3e9, -3e9, 2.0 ** 63, float("inf"), float("-inf"), float("nan"), -0.5, 0.5,
                      2.5, -2.5, -0.0, 7.0], dtype=dtype)
    out = torch.empty_like(x)
    unary_kernel[(1,)](x, out, x.numel(), OP="ceil", BLOCK=16)
    torch.testing.assert_close(out, torch.ceil(x), rtol=0, atol=0, equal_nan=True)
    assert torch.equal(torch.signbit(out[~x.isnan()]), torch.signbit(torch.ceil(x)[~x.isnan()]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_exp2_is_accurate_across_the_range(target, dtype):
    info = torch.finfo(dtype)
    x = torch.cat([torch.linspace(-160 if dtype == torch.float32 else -1100, 130 if dtype == torch.float32 else 1030,
                                  500, dtype=dtype), torch.arange(-30, 31, dtype=dtype),
                   torch.tensor([float("inf"), float("-inf"), float("nan"), 0.5, -0.0], dtype=dtype)])
    out = torch.empty_like(x)
    unary_kernel[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), OP="exp2", BLOCK=256)
    exact = torch.exp2(x.double())
    exact = torch.where(exact > info.max, float("inf"), exact)
    ulp = torch.clamp(exact.abs(), min=info.smallest_normal) * info.eps
    assert torch.all(((out.double() - exact).abs() <= 2 * ulp) | (out.double() == exact) | (out.isnan() & exact.isnan()))
    integers = x == x.round()
    assert torch.equal(out[integers & (x.abs() < 100)], exact[integers & (x.abs() < 100)].to(dtype))


def test_float64_to_bfloat16_rounds_once(target):
    from tests.fuzz.dtypes import BF16, round_to
    x = torch.randn(200, dtype=torch.float64) * 2.0 ** torch.randint(-140, 128, (200,))
    # just above a bf16 half-way point: rounding to f32 first would land on it and round to even
    x[:4] = torch.tensor([1 + 2 ** -8 + 2 ** -30, -(3 + 2 ** -7 + 2 ** -40), 1e39, 2 ** -140], dtype=torch.float64)
    out = torch.empty(200, dtype=torch.bfloat16)
    unary_kernel[(1,)](x, out, 200, OP="cast", BLOCK=256)
    assert torch.equal(out.double(), torch.from_numpy(round_to(x.numpy(), BF16)))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_integers_to_bfloat16_round_once(target, dtype):
    from tests.fuzz.dtypes import BF16, ints_to_float
    info = torch.iinfo(dtype)
    x = torch.randint(info.min, info.max, (200,), dtype=dtype)
    x[:3] = torch.tensor([2 ** 24 + 2 ** 16 + 1, -(2 ** 25 + 2 ** 17 + 1), info.max], dtype=dtype)
    if dtype == torch.int64:
        x[3] = 2 ** 56 + 2 ** 48 + 1          # a tie for bf16 once rounded to float64
    out = torch.empty(200, dtype=torch.bfloat16)
    unary_kernel[(1,)](x, out, 200, OP="cast", BLOCK=256)
    assert torch.equal(out.double(), torch.from_numpy(ints_to_float(x.numpy(), BF16)))


@triton.jit
def wrapping_index_kernel(out_ptr, neg_ptr, k, BLOCK: tl.constexpr):
    # int32 index arithmetic that wraps, then widened and compared as data
    offs = tl.arange(0, BLOCK)
    x = offs + k                           # k near INT32_MAX: the upper lanes wrap
    y = offs - (-2147483648)               # wraps for every lane
    tl.store(out_ptr + offs, x.to(tl.int64))
    tl.store(out_ptr + BLOCK + offs, (y.to(tl.int64) * 3) & (x.to(tl.int64) | 1))
    tl.store(neg_ptr + offs, x < 0)


def test_int32_index_arithmetic_wraps_as_data(target):
    k = 2 ** 31 - 5
    out, neg = torch.empty(32, dtype=torch.int64), torch.empty(16, dtype=torch.bool)
    wrapping_index_kernel[(1,)](out, neg, k, BLOCK=16)
    offs = torch.arange(16, dtype=torch.int64)
    wrap = lambda v: (v + 2 ** 31) % 2 ** 32 - 2 ** 31      # noqa: E731
    x, y = wrap(offs + k), wrap(offs + 2 ** 31)
    assert torch.equal(out[:16], x)
    assert torch.equal(out[16:], (y * 3) & (x | 1))
    assert torch.equal(neg, x < 0)


@triton.jit
def _gelu_and_mul_gradient(x, y, dgrad):
    x_gelu = 0.5 * x * (1 + tl.math.erf(x * 0.7071067811))
    d_gelu = dgrad * y
    dx = d_gelu * 0.5 * (1.0 + tl.math.erf(x * 0.7071067811) + x * 0.7978845608028654 * tl.exp(-0.5 * x * x))
    return dx, dgrad * x_gelu


@triton.jit
def two_outputs_kernel(x_ptr, y_ptr, g_ptr, dx_ptr, dy_ptr, n, BLOCK: tl.constexpr):
    """FlagGems' GELU-and-mul gradient: the tile 1 + erf(...) is read by the first output and, multiplied
    in place, by the second, which is stored after the first."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    dx, dy = _gelu_and_mul_gradient(tl.load(x_ptr + offs, mask=mask), tl.load(y_ptr + offs, mask=mask),
                                    tl.load(g_ptr + offs, mask=mask))
    tl.store(dx_ptr + offs, dx, mask=mask)
    tl.store(dy_ptr + offs, dy, mask=mask)


def test_a_tile_two_outputs_read_is_not_overwritten_early(target):
    n = 266
    x, y, g = torch.randn(n), torch.randn(n), torch.randn(n)
    dx, dy = torch.empty(n), torch.empty(n)
    two_outputs_kernel[(triton.cdiv(n, 64),)](x, y, g, dx, dy, n, BLOCK=64)
    xd, yd, gd = x.double(), y.double(), g.double()
    erf = torch.erf(xd * 0.7071067811)
    slope = xd * 0.7978845608028654 * torch.exp(-0.5 * xd * xd)
    torch.testing.assert_close(dx.double(), gd * yd * 0.5 * (1 + erf + slope))
    torch.testing.assert_close(dy.double(), gd * 0.5 * xd * (1 + erf))
