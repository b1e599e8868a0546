"""libdevice on CPUs (spine/language/cpu/libdevice.py, to_linalg/extern.py): every name of triton's
libdevice API exists, and each family computes what its CUDA counterpart does: rounding modes exactly
(against exact rational arithmetic), conversions saturating, special functions against scipy/mpmath, bit
functions against Python integers. Several functions share one kernel to keep compiles few."""
import math
from fractions import Fraction

import mpmath
import numpy as np
import pytest
import scipy.special as sp
import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

MODES = ("rn", "rz", "rd", "ru")


@triton.jit
def apply_kernel(x_ptr, y_ptr, z_ptr, out_ptr, n, FNS: tl.constexpr, ARITY: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    z = tl.load(z_ptr + offs, mask=mask)
    for i in tl.static_range(len(FNS)):
        if ARITY == 1:
            r = getattr(libdevice, FNS[i])(x)
        elif ARITY == 2:
            r = getattr(libdevice, FNS[i])(x, y)
        else:
            r = getattr(libdevice, FNS[i])(x, y, z)
        tl.store(out_ptr + i * n + offs, r, mask=mask)


def launch(fns, x, y, z, out, arity):
    n = out.shape[-1] if hasattr(out, "shape") else out.base.shape[-1]
    apply_kernel[(1,)](x, y, z, out, n, tuple(fns), arity, BLOCK=triton.next_power_of_2(n))


def apply(fns, x, y=None, z=None, out_dtype=None, arity=1):
    """Each function of `fns` on the same arguments; one row of results per function."""
    y = x if y is None else y
    z = x if z is None else z
    out = torch.empty((len(fns), x.numel()), dtype=out_dtype or x.dtype)
    launch(fns, x, y, z, out, arity)
    return out


def test_every_libdevice_name_exists():
    import spine.language.cpu.libdevice as ours
    import triton.language.extra.libdevice as api
    names = [n for n in dir(api) if not n.startswith("_") and callable(getattr(api, n))]
    assert len(names) > 190
    assert [n for n in names if not hasattr(ours, n)] == []


# ---------------------------------------------------------------------------- exact rounding references

NP = {torch.float32: np.float32, torch.float64: np.float64}


def round_exact(v, np_type, mode):
    """The exact rational v rounded to np_type in the mode (v inside the finite range)."""
    c = np_type(float(v))
    if not np.isfinite(c):
        c = np.nextafter(c, np_type(0))
    if Fraction(float(c)) == v:
        return c
    if Fraction(float(c)) < v:
        lo, hi = c, np.nextafter(c, np_type(np.inf))
    else:
        lo, hi = np.nextafter(c, np_type(-np.inf)), c
    if mode == "ru":
        return hi
    if mode == "rd":
        return lo
    if mode == "rz":
        return lo if v > 0 else hi
    d_lo, d_hi = v - Fraction(float(lo)), Fraction(float(hi)) - v
    if d_lo != d_hi:
        return lo if d_lo < d_hi else hi
    return lo if int(np.array(lo).view(np.uint64 if np_type is np.float64 else np.uint32)) % 2 == 0 else hi


def exact_sqrt_rounded(x, np_type, mode):
    """sqrt(x) rounded in the mode, by bisection on exact squares."""
    x = Fraction(float(x))
    guess = np_type(math.sqrt(float(x)))
    lo, hi = np.nextafter(guess, np_type(0)), np.nextafter(guess, np_type(np.inf))
    candidates = [lo, guess, hi]
    below = [c for c in candidates if Fraction(float(c)) ** 2 <= x]
    above = [c for c in candidates if Fraction(float(c)) ** 2 >= x]
    down, up = max(below), min(above)
    if down == up:
        return down
    if mode in ("rd", "rz"):
        return down
    if mode == "ru":
        return up
    mid = (Fraction(float(down)) + Fraction(float(up))) / 2
    return down if mid ** 2 > x else up


def rounding_inputs(dtype, n=64):
    torch.manual_seed(3)
    x = torch.randn(n, dtype=torch.float64) * torch.exp2(torch.randint(-20, 20, (n,)).double())
    y = torch.randn(n, dtype=torch.float64) * torch.exp2(torch.randint(-20, 20, (n,)).double())
    z = torch.randn(n, dtype=torch.float64)
    x[:4] = torch.tensor([1.0, 1.0, 3.0, 0.1])
    y[:4] = torch.tensor([3.0, 2.0 ** -30, 7.0, 0.2])         # inexact quotients and sums
    return x.to(dtype), y.to(dtype), z.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_arithmetic_in_every_rounding_mode(target, dtype):
    x, y, z = rounding_inputs(dtype)
    binary = [f"{op}_{m}" for op in ("add", "sub", "mul", "div") for m in MODES]
    got2 = apply(binary, x, y, arity=2)
    got3 = apply([f"fma_{m}" for m in MODES], x, y, z, arity=3)
    got1 = apply([f"{op}_{m}" for op in ("sqrt", "rcp") for m in MODES], x.abs())
    t = NP[dtype]
    exact = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
             "div": lambda a, b: a / b}
    for row, name in enumerate(binary):
        op, mode = name.split("_")
        for i in range(x.numel()):
            a, b = Fraction(x[i].item()), Fraction(y[i].item())
            assert got2[row, i].item() == round_exact(exact[op](a, b), t, mode), (name, a, b)
    for row, mode in enumerate(MODES):
        for i in range(x.numel()):
            v = Fraction(x[i].item()) * Fraction(y[i].item()) + Fraction(z[i].item())
            assert got3[row, i].item() == round_exact(v, t, mode), ("fma", mode, i)
    for row, mode in enumerate(MODES):
        for i in range(x.numel()):
            a = abs(x[i].item())
            assert got1[row, i].item() == exact_sqrt_rounded(a, t, mode), ("sqrt", mode, a)
            assert got1[4 + row, i].item() == round_exact(1 / Fraction(a), t, mode), ("rcp", mode, a)


def test_rsqrt_rn_is_correctly_rounded(target):
    torch.manual_seed(4)
    x = torch.rand(256) * torch.exp2(torch.randint(-30, 30, (256,)).float())
    got = apply(["rsqrt_rn"], x)[0]
    mpmath.mp.prec = 100
    for i in range(256):
        exact = 1 / mpmath.sqrt(mpmath.mpf(x[i].item()))
        rational = Fraction(int(exact * 2 ** 200), 2 ** 200)        # far more bits than a tie needs
        assert got[i].item() == round_exact(rational, np.float32, "rn"), x[i].item()


def test_double_to_float_in_every_mode(target):
    x, _, _ = rounding_inputs(torch.float64)
    got = apply([f"double2float_{m}" for m in MODES], x, out_dtype=torch.float32)
    for row, mode in enumerate(MODES):
        for i in range(x.numel()):
            assert got[row, i].item() == round_exact(Fraction(x[i].item()), np.float32, mode)


def _round_integral(v: float, mode: str) -> int:
    if mode == "rn":
        return int(round(v))          # Python rounds half to even
    return {"rz": math.trunc, "rd": math.floor, "ru": math.ceil}[mode](v)


@pytest.mark.parametrize("source,name", [(torch.float32, "float"), (torch.float64, "double")])
def test_float_to_integer_saturates(target, source, name):
    x = torch.tensor([0.5, 1.5, 2.5, -0.5, -1.5, 2.7, -2.7, 1e10, -1e10, 3e19, -3e19, float("inf"),
                      float("-inf"), float("nan"), 2147483647.6, 4294967295.4], dtype=source)
    targets = [("int", 32, True), ("uint", 32, False), ("ll", 64, True), ("ull", 64, False)]
    fns = [f"{name}2{t}_{m}" for t, _, _ in targets for m in MODES]
    got = apply(fns[:8], x, out_dtype=torch.int32), apply(fns[8:], x, out_dtype=torch.int64)
    for k, fn in enumerate(fns):
        target_name, mode = fn.split("2")[1].rsplit("_", 1)
        width, signed = {t: (w, s) for t, w, s in targets}[target_name]
        row = got[k // 8][k % 8]
        lo, hi = (-(1 << (width - 1)), (1 << (width - 1)) - 1) if signed else (0, (1 << width) - 1)
        for i, v in enumerate(x.tolist()):
            expected = 0 if math.isnan(v) else (hi if v == math.inf else lo if v == -math.inf
                                                 else min(max(_round_integral(v, mode), lo), hi))
            got_value = row[i].item() & ((1 << width) - 1)
            assert got_value == expected & ((1 << width) - 1), (fn, v)


@pytest.mark.parametrize("source,dtype,prefix,targets", [
    ("int32", torch.int32, "int", ("float",)), ("uint32", torch.int32, "uint", ("float",)),
    ("int64", torch.int64, "ll", ("float", "double")), ("uint64", torch.int64, "ull", ("float", "double"))])
def test_integer_to_float_in_every_mode(target, source, dtype, prefix, targets):
    width = 32 if "32" in source else 64
    signed = not source.startswith("u")
    values = [0, 1, -1, 3, (1 << 24) + 1, (1 << 24) + 3, -(1 << 25) - 3, (1 << (width - 1)) - 1,
              -(1 << (width - 1)), (1 << 53) + 1, 123456789123 % (1 << (width - 1)), 16777217 * 7]
    values = [v % (1 << width) for v in values]
    values = [v - (1 << width) if signed and v >> (width - 1) else v for v in values]
    bits = torch.tensor([v - (1 << width) if v >= 1 << (width - 1) else v for v in values], dtype=dtype)
    x = triton.reinterpret(bits, getattr(tl, source)) if not signed else bits
    for name in targets:
        out_dtype = torch.float32 if name == "float" else torch.float64
        fns = [f"{prefix}2{name}_{m}" for m in MODES]
        out = torch.empty((4, len(values)), dtype=out_dtype)
        launch(fns, x, x, x, out, 1)
        for row, mode in enumerate(MODES):
            for i, v in enumerate(values):
                assert out[row, i].item() == round_exact(Fraction(v), NP[out_dtype], mode), (fns[row], v)


# ------------------------------------------------------------------------------------- special functions

def close(got, expected, rtol, atol=0.0):
    """Within tolerance of the reference rounded to the result's type (underflow and overflow included)."""
    with np.errstate(over="ignore", under="ignore"):
        expected = np.asarray(expected, dtype=np.float64).astype(got.numpy().dtype).astype(np.float64)
    np.testing.assert_allclose(got.double().numpy(), expected, rtol=rtol, atol=atol, equal_nan=True)


@pytest.mark.parametrize("dtype,rtol", [(torch.float32, 2e-6), (torch.float64, 1e-12)])
def test_bessel_and_error_functions(target, dtype, rtol):
    torch.manual_seed(5)
    x = torch.cat([torch.randn(40) * 3, torch.tensor([0.0, 29.9, 30.1, 45.0, -60.0, 80.0])]).to(dtype)
    got = apply(["cyl_bessel_i0", "cyl_bessel_i1", "j0", "j1", "y0", "y1", "erfcx"], x)
    xs = x.double().numpy()
    close(got[0], sp.i0(xs), rtol)
    close(got[1], sp.i1(xs), rtol)
    close(got[2], sp.j0(xs), rtol, atol=1e-6 if dtype == torch.float32 else 1e-13)
    close(got[3], sp.j1(xs), rtol, atol=1e-6 if dtype == torch.float32 else 1e-13)
    positive = xs > 0
    close(got[4][positive], sp.y0(xs[positive]), rtol, atol=1e-6 if dtype == torch.float32 else 1e-13)
    close(got[5][positive], sp.y1(xs[positive]), rtol, atol=1e-6 if dtype == torch.float32 else 1e-13)
    close(got[6], sp.erfcx(xs), 8 * rtol)
    p = torch.cat([torch.rand(40), torch.tensor([1e-30, 1e-10, 0.5, 1.0, 0.0, 1.999999, 2.0])]).to(dtype)
    inverse = apply(["erfinv", "erfcinv", "normcdfinv", "normcdf"], p)
    ps = p.double().numpy()
    close(inverse[0], sp.erfinv(ps), 4 * rtol)
    close(inverse[1], sp.erfcinv(ps), 4 * rtol)
    close(inverse[2][ps <= 1], sp.ndtri(ps[ps <= 1]), 4 * rtol)
    close(inverse[3], sp.ndtr(ps), rtol)


@pytest.mark.parametrize("dtype,rtol", [(torch.float32, 1e-6), (torch.float64, 1e-14)])
def test_trigonometric_and_other_math(target, dtype, rtol):
    torch.manual_seed(6)
    x = torch.cat([torch.randn(40) * 4, torch.tensor([0.5, 1.0, 1.5, -2.0, 2.5, 1e9, -0.0])]).to(dtype)
    got = apply(["sinpi", "cospi", "exp10", "rcbrt", "lgamma", "logb", "rint", "nearbyint", "erfc"], x)
    mpmath.mp.prec = 120
    xs = x.double().tolist()
    close(got[0], [float(mpmath.sinpi(v)) for v in xs], rtol, atol=1e-30)
    close(got[1], [float(mpmath.cospi(v)) for v in xs], rtol, atol=1e-30)
    assert got[0][40:46].tolist() == [1.0, 0.0, -1.0, 0.0, 1.0, 0.0] and got[1][40:46].tolist()[::2] == [0.0, 0.0, 0.0]
    exp10 = [float(mpmath.power(10, v)) for v in xs]
    close(got[2], [e if e < np.finfo(NP[dtype]).max else math.inf for e in exp10], 4 * rtol)
    close(got[3], [1 / np.cbrt(v) if v else math.copysign(math.inf, v) for v in xs], 2 * rtol)
    close(got[4], sp.gammaln(xs), 4 * rtol, atol=1e-6)
    close(got[5], [math.floor(math.log2(abs(v))) if v else -math.inf for v in xs], 0)
    close(got[6], np.rint(xs), 0)
    close(got[7], np.rint(xs), 0)
    close(got[8], sp.erfc(xs), 4 * rtol)
    if dtype == torch.float32:
        saturated = apply(["saturatef"], torch.tensor([-1.0, 0.25, 3.0, float("nan"), -0.0, 1.0]))
        assert saturated[0].tolist() == [0.0, 0.25, 1.0, 0.0, 0.0, 1.0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_two_and_more_argument_math(target, dtype):
    torch.manual_seed(7)
    x = (torch.randn(32) * 3).to(dtype)
    y = (torch.randn(32) * 3).to(dtype)
    z = torch.randn(32).to(dtype)
    x[0], y[0] = 1e30 if dtype == torch.float32 else 1e300, 1e30 if dtype == torch.float32 else 1e300
    two = apply(["hypot", "rhypot", "fdim", "nextafter", "remainder", "fmod", "copysign", "atan2"], x, y, arity=2)
    three = apply(["norm3d", "rnorm3d"], x, y, z, arity=3)
    xs, ys, zs = x.double().numpy(), y.double().numpy(), z.double().numpy()
    t = NP[dtype]
    rtol = 1e-6 if dtype == torch.float32 else 1e-14
    close(two[0], np.hypot(xs, ys), rtol)
    close(two[1], 1 / np.hypot(xs, ys), 2 * rtol)
    close(two[2], np.where(xs > ys, xs - ys, 0.0), rtol)
    assert np.array_equal(two[3].numpy(), np.nextafter(x.numpy(), y.numpy()))
    close(two[4], [math.remainder(a, b) for a, b in zip(x.tolist(), y.tolist())], 0, atol=0)
    close(two[5], [math.fmod(a, b) for a, b in zip(x.tolist(), y.tolist())], 0, atol=0)
    close(two[6], np.copysign(xs, ys), 0)
    close(two[7], np.arctan2(xs, ys), 4 * rtol)
    norms = [math.hypot(float(a), float(b), float(c)) for a, b, c in zip(xs, ys, zs)]
    close(three[0], np.array(norms).astype(t), rtol)
    close(three[1], 1 / np.array(norms), 2 * rtol)


@triton.jit
def int_argument_kernel(x_ptr, n_ptr, out_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    n = tl.load(n_ptr + offs)
    tl.store(out_ptr + offs, libdevice.ldexp(x, n))
    tl.store(out_ptr + N + offs, libdevice.scalbn(x, n))
    tl.store(out_ptr + 2 * N + offs, libdevice.pow(x, n))
    tl.store(out_ptr + 3 * N + offs, libdevice.jn(n, x))
    tl.store(out_ptr + 4 * N + offs, libdevice.yn(n, tl.abs(x) + 0.5))
    tl.store(out_ptr + 5 * N + offs, libdevice.ilogb(x).to(x.dtype))
    # a scalar call (no tensor): the C library function called once
    tl.store(out_ptr + 6 * N, libdevice.lgamma(tl.load(x_ptr)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_functions_with_int_arguments(target, dtype):
    x = torch.tensor([-2.5, 3.0, 0.75, -1.5, 10.0, 1e-3, 5.0, -7.0], dtype=dtype)
    n = torch.tensor([3, -2, 5, 4, 0, 2, 1, 3], dtype=torch.int32)
    out = torch.empty(7 * 8, dtype=dtype)
    int_argument_kernel[(1,)](x, n, out, N=8)
    xs, ns = x.tolist(), n.tolist()
    rtol = 1e-6 if dtype == torch.float32 else 1e-13
    close(out[:8], [math.ldexp(a, k) for a, k in zip(xs, ns)], 0)
    close(out[8:16], [math.ldexp(a, k) for a, k in zip(xs, ns)], 0)
    close(out[16:24], [a ** k for a, k in zip(xs, ns)], rtol)          # negative bases too
    close(out[24:32], sp.jv(ns, xs), rtol, atol=1e-7)
    close(out[32:40], sp.yv(ns, np.abs(xs) + 0.5), 4 * rtol)
    close(out[40:48], [math.frexp(a)[1] - 1 for a in xs], 0)
    close(out[48:49], [math.lgamma(xs[0])], rtol)


def test_classification_and_rounding_to_integers(target):
    x = torch.tensor([1.0, -0.0, float("inf"), float("-inf"), float("nan"), 2.5, -3.5, 1e20])
    flags = torch.empty((4, 8), dtype=torch.bool)
    launch(("isnan", "isinf", "finitef", "signbit"), x, x, x, flags, 1)
    xs = x.numpy()
    assert flags[0].tolist() == np.isnan(xs).tolist()
    assert flags[1].tolist() == np.isinf(xs).tolist()
    assert flags[2].tolist() == np.isfinite(xs).tolist()
    assert flags[3].tolist() == np.signbit(xs).tolist()
    rounded = apply(["llrint", "llround"], x, out_dtype=torch.int64)
    big = (1 << 63) - 1
    assert rounded[0].tolist() == [1, 0, big, -big - 1, 0, 2, -4, big]
    assert rounded[1].tolist() == [1, 0, big, -big - 1, 0, 3, -4, big]
    d = x.double()
    finite = torch.empty((1, 8), dtype=torch.bool)
    launch(("isfinited",), d, d, d, finite, 1)
    assert finite[0].tolist() == np.isfinite(xs).tolist()


# ------------------------------------------------------------------------------------------------ bits

def u32(v):
    return v & 0xFFFFFFFF


def s32(v):
    v = u32(v)
    return v - (1 << 32) if v >> 31 else v


def test_integer_bit_functions(target):
    values = [0, 1, -1, 0x12345678, -0x7FFFFFFF - 1, 0x7FFFFFFF, 0x00F0F000, -123456789, 1 << 20, 77]
    x = torch.tensor(values, dtype=torch.int32)
    y = torch.tensor(values[::-1], dtype=torch.int32)
    sel = torch.tensor([0x3210, 0x7654, 0x0415, 0x7777, 0x1302, 0x5555, 0x6240, 0x0123, 0x7531, 0x4567],
                       dtype=torch.int32)
    one = apply(["clz", "popc", "ffs", "brev", "abs"], x)
    two = apply(["mulhi", "mul24", "hadd", "rhadd"], x, y, arity=2)
    perm = apply(["byte_perm"], x, y, sel, arity=3)
    for i, (a, b, s) in enumerate(zip(values, values[::-1], sel.tolist())):
        ua = u32(a)
        assert one[0, i] == (32 - ua.bit_length()), a
        assert one[1, i] == bin(ua).count("1")
        assert one[2, i] == ((ua & -ua).bit_length())
        assert u32(one[3, i].item()) == int(f"{ua:032b}"[::-1], 2)
        assert one[4, i] == s32(abs(a))
        assert two[0, i] == s32((a * b) >> 32)
        lo24 = lambda v: ((u32(v) & 0xFFFFFF) ^ 0x800000) - 0x800000
        assert two[1, i] == s32(lo24(a) * lo24(b))
        assert two[2, i] == (a + b) >> 1
        assert two[3, i] == (a + b + 1) >> 1
        pair = (u32(b) << 32) | ua
        expected = sum(((pair >> (8 * ((s >> (4 * k)) & 7))) & 0xFF) << (8 * k) for k in range(4))
        assert u32(perm[0, i].item()) == expected
    wide = torch.tensor([0, 1, -1, 1 << 40, -(1 << 62), 0x123456789ABCDEF], dtype=torch.int64)
    w = apply(["clz", "popc", "ffs"], wide, out_dtype=torch.int32)
    for i, v in enumerate(wide.tolist()):
        uv = v & ((1 << 64) - 1)
        assert w[0, i] == 64 - uv.bit_length() and w[1, i] == bin(uv).count("1")
        assert w[2, i] == (uv & -uv).bit_length()
    rev = apply(["brev"], wide)
    assert [r & ((1 << 64) - 1) for r in rev[0].tolist()] == \
        [int(f"{v & ((1 << 64) - 1):064b}"[::-1], 2) for v in wide.tolist()]


def test_unsigned_variants_and_sad(target):
    a = torch.tensor([0, 5, 0xFFFFFFFF, 0x80000000, 1234567], dtype=torch.int64).to(torch.int32)
    b = torch.tensor([7, 0xFFFFFFFE, 3, 0x80000001, 7654321], dtype=torch.int64).to(torch.int32)
    c = torch.tensor([1, 2, 3, 4, 5], dtype=torch.int32)
    ua, ub, uc = (triton.reinterpret(t, tl.uint32) for t in (a, b, c))
    out = torch.empty((4, 5), dtype=torch.int32)
    launch(("mulhi", "mul24", "hadd", "rhadd"), ua, ub, uc, triton.reinterpret(out, tl.uint32), 2)
    signed_sad = torch.empty((1, 5), dtype=torch.int32)
    launch(("sad",), a, b, uc, signed_sad, 3)
    for i in range(5):
        x, y, z = u32(a[i].item()), u32(b[i].item()), c[i].item()
        assert u32(out[0, i].item()) == (x * y) >> 32
        assert u32(out[1, i].item()) == u32((x & 0xFFFFFF) * (y & 0xFFFFFF))
        assert u32(out[2, i].item()) == (x + y) >> 1
        assert u32(out[3, i].item()) == (x + y + 1) >> 1
        assert u32(signed_sad[0, i].item()) == u32(abs(s32(x) - s32(y)) + z)


def test_float_bits(target):
    d = torch.tensor([1.5, -2.0, 3.14159, 1e-300, float("inf")], dtype=torch.float64)
    lo_hi = apply(["double2loint", "double2hiint"], d, out_dtype=torch.int32)
    back = torch.empty((1, 5), dtype=torch.float64)
    launch(("hiloint2double",), lo_hi[1].contiguous(), lo_hi[0].contiguous(), d, back, 2)
    assert torch.equal(back[0], d)
    as_int = apply(["double_as_longlong"], d, out_dtype=torch.int64)
    assert torch.equal(as_int[0], d.view(torch.int64))
    f = d.float()
    fi = apply(["float_as_int"], f, out_dtype=torch.int32)
    assert torch.equal(fi[0], f.view(torch.int32))
    rcp = apply(["rcp64h"], d)
    assert torch.equal(rcp[0].view(torch.int64), (1 / d).view(torch.int64) & ~0xFFFFFFFF)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_spine_tritons_gelu_functions_are_torchs(target, dtype):
    """`libdevice.gelu_none` and `gelu_tanh` (spine-triton's names) against torch's gelu, computed in
    float64 and rounded once: fp16/bf16 are computed in fp32 (within one rounding of the result type)."""
    from triton.language.extra.cpu import libdevice as spine_triton_libdevice
    assert spine_triton_libdevice.gelu_tanh is not None and spine_triton_libdevice.gelu_none is not None
    x = torch.cat([torch.randn(997) * 4, torch.tensor([0.0, -0.0, 1e-30, -30.0, 30.0, float("inf"),
                                                        float("-inf")])]).to(dtype)
    out = apply(["gelu_none", "gelu_tanh"], x)
    wide = x.double()
    tolerance = {torch.float32: 2e-6, torch.float64: 1e-14, torch.float16: 1e-3, torch.bfloat16: 8e-3}[dtype]
    for row, approximate in zip(out, ("none", "tanh")):
        expected = torch.nn.functional.gelu(wide, approximate=approximate).to(dtype)
        torch.testing.assert_close(row, expected, rtol=tolerance, atol=tolerance, equal_nan=True)
