"""smt.dot: input types and what they sum in, result types, accumulators (acc=, and `acc += smt.dot`
fused), B packed transposed, micro tiles of every shape that divides the block."""
import pytest
import torch
import triton
import triton.language as tl
import triton.language.extra.smt as smt


@triton.jit
def dot_kernel(a_ptr, b_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr, MM: tl.constexpr,
               MK: tl.constexpr, MN: tl.constexpr, OUT: tl.constexpr, B_TRANSPOSED: tl.constexpr):
    """C = A @ B for whole small matrices (row-major, powers of two), through packed tiles."""
    rm, rn, rk = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
    a = smt.view(tl.load(a_ptr + rm[:, None] * K + rk[None, :]), (0, 0), (M, K), (MM, MK))
    if B_TRANSPOSED:
        b = smt.view(tl.load(b_ptr + rn[:, None] * K + rk[None, :]), (0, 0), (N, K), (MN, MK))
    else:
        b = smt.view(tl.load(b_ptr + rk[:, None] * N + rn[None, :]), (0, 0), (K, N), (MK, MN))
    if OUT == 0:
        tiles = smt.dot(a, b)
    else:
        tiles = smt.dot(a, b, out_dtype=OUT)
    c = smt.view(tiles, (0, 0), (M, N), (1, 1))
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], c)


def run_dot(a, b, micro, out_dtype=None, out_torch=None, b_transposed=False):
    m, k = a.shape
    n = b.shape[0] if b_transposed else b.shape[1]
    c = torch.empty(m, n, dtype=out_torch or a.dtype)
    dot_kernel[(1,)](a, b, c, M=m, N=n, K=k, MM=micro[0], MK=micro[1], MN=micro[2], OUT=out_dtype or 0,
                     B_TRANSPOSED=b_transposed)
    return c


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_float_types(target, dtype):
    """Sums in fp32 (fp64 for fp64), result in the input type, rounded once."""
    a = torch.randn(32, 64).to(dtype)
    b = torch.randn(64, 32).to(dtype)
    c = run_dot(a, b, (8, 8, 16))
    wide = torch.float64 if dtype == torch.float64 else torch.float32
    expected = torch.mm(a.to(wide), b.to(wide)).to(dtype)
    tol = {torch.float32: 1e-4, torch.float64: 1e-10, torch.float16: 1e-2, torch.bfloat16: 2e-2}[dtype]
    torch.testing.assert_close(c, expected, rtol=tol, atol=tol)


def test_int8_sums_in_int32(target):
    a = torch.randint(-128, 128, (16, 64), dtype=torch.int8)
    b = torch.randint(-128, 128, (64, 32), dtype=torch.int8)
    c = run_dot(a, b, (4, 16, 8), out_torch=torch.int32)
    assert torch.equal(c, torch.mm(a.int(), b.int()))


def test_out_dtype_keeps_fp32_sums(target):
    a = torch.randn(16, 32, dtype=torch.float16)
    b = torch.randn(32, 32, dtype=torch.float16)
    c = run_dot(a, b, (16, 8, 32), out_dtype=tl.float32, out_torch=torch.float32)
    torch.testing.assert_close(c, torch.mm(a.float(), b.float()), rtol=1e-5, atol=1e-5)


def test_b_packed_transposed(target):
    """b as [N1, K1, n, k] (B^T packed), which spine-triton's smt.dot also accepts."""
    a = torch.randn(16, 32)
    bt = torch.randn(64, 32)
    c = run_dot(a, bt, (8, 8, 16), b_transposed=True)
    torch.testing.assert_close(c, a @ bt.t(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("micro", [(16, 8, 32), (8, 8, 16), (1, 2, 4), (2, 32, 4), (32, 4, 64), (4, 64, 2)])
def test_micro_tiles(target, micro):
    a = torch.randn(32, 64)
    b = torch.randn(64, 64)
    torch.testing.assert_close(run_dot(a, b, micro), a @ b, rtol=1e-4, atol=1e-4)


@triton.jit
def accumulate_kernel(a_ptr, b_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr, KS: tl.constexpr,
                      MM: tl.constexpr, MK: tl.constexpr, MN: tl.constexpr, FUSED: tl.constexpr,
                      ACC_TYPE: tl.constexpr):
    """C = A @ B summed over K in steps of KS into a packed accumulator: `acc += smt.dot(a, b)`, or acc=."""
    rm, rn, rk = tl.arange(0, M), tl.arange(0, N), tl.arange(0, KS)
    acc = smt.view(tl.zeros((M, N), dtype=ACC_TYPE), (0, 0), (M, N), (MM, MN))
    for k in range(0, K, KS):
        a = smt.view(tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :]), (0, 0), (M, KS), (MM, MK))
        b = smt.view(tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :]), (0, 0), (KS, N), (MK, MN))
        if FUSED:
            acc += smt.dot(a, b)
        else:
            acc = smt.dot(a, b, acc)
    tl.store(c_ptr + rm[:, None] * N + tl.arange(0, N)[None, :], smt.view(acc, (0, 0), (M, N), (1, 1)))


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_accumulate(target, fused, dtype):
    a = torch.randn(32, 96).to(dtype)
    b = torch.randn(96, 32).to(dtype)
    c = torch.empty(32, 32, dtype=dtype)
    accumulate_kernel[(1,)](a, b, c, M=32, N=32, K=96, KS=32, MM=16, MK=8, MN=16, FUSED=fused,
                            ACC_TYPE=tl.float32 if dtype == torch.float32 else tl.float16)
    tol = 1e-4 if dtype == torch.float32 else 5e-2
    torch.testing.assert_close(c.float(), a.float() @ b.float(), rtol=tol, atol=tol)
