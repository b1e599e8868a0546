import ctypes
import mmap

import pytest
import torch
import triton
import triton.language as tl


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """Triton's matmul tutorial shape: pointers advanced along K, masked edges, fp32 accumulator."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a_ptrs = a_ptr + rm[:, None] * stride_am + rk[None, :] * stride_ak
    b_ptrs = b_ptr + rk[:, None] * stride_bk + rn[None, :] * stride_bn
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        a = tl.load(a_ptrs, mask=(rm[:, None] < M) & (rk[None, :] < K - k * BK), other=0.0)
        b = tl.load(b_ptrs, mask=(rk[:, None] < K - k * BK) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BK * stride_ak
        b_ptrs += BK * stride_bk
    c = acc.to(c_ptr.dtype.element_ty)
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, c, mask=(rm[:, None] < M) & (rn[None, :] < N))


@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (33, 47, 65), (64, 32, 16)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_matmul(target, m, n, k, dtype):
    a = torch.randn(m, k).to(dtype)
    b = torch.randn(k, n).to(dtype)
    c = torch.empty(m, n, dtype=dtype)
    grid = (triton.cdiv(m, 16), triton.cdiv(n, 16))
    matmul_kernel[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                        c.stride(1), BM=16, BN=16, BK=16)
    expected = (a.float() @ b.float()).to(dtype)
    tol = 1e-4 if dtype == torch.float32 else 1e-2
    torch.testing.assert_close(c, expected, rtol=tol, atol=tol)


def test_matmul_of_transposed_view(target):
    a = torch.randn(40, 30).t()  # strides (1, 30)
    b = torch.randn(40, 20)
    c = torch.empty(30, 20)
    matmul_kernel[(2, 2)](a, b, c, 30, 20, 40, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                          c.stride(1), BM=16, BN=16, BK=16)
    torch.testing.assert_close(c, a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_matmul_of_transposed_operands_full_and_edge_tiles(target, dtype):
    """Both operands read across their rows (x @ W^T with W as nn.Linear keeps it): whole 16 x 16 tiles
    are transposed in registers on x86, edge tiles element by element."""
    m, n, k = 37, 45, 50
    a = torch.randn(k, m).to(dtype).t()
    b = torch.randn(n, k).to(dtype).t()
    c = torch.empty(m, n, dtype=dtype)
    grid = (triton.cdiv(m, 16), triton.cdiv(n, 16))
    matmul_kernel[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                        c.stride(1), BM=16, BN=16, BK=16)
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(c.float(), a.float() @ b.float(), rtol=tol, atol=tol)


@triton.jit
def int8_dot_kernel(a_ptr, b_ptr, c_ptr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a = tl.load(a_ptr + rm[:, None] * BK + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * BN + rn[None, :])
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], tl.dot(a, b, out_dtype=tl.int32))


@pytest.mark.parametrize("m,n,k", [(16, 16, 32), (32, 32, 64)])
def test_int8_dot_accumulates_in_int32(target, m, n, k):
    a = torch.randint(-128, 127, (m, k), dtype=torch.int8)
    b = torch.randint(-128, 127, (k, n), dtype=torch.int8)
    c = torch.empty(m, n, dtype=torch.int32)
    int8_dot_kernel[(1,)](a, b, c, BM=m, BN=n, BK=k)
    torch.testing.assert_close(c, a.int() @ b.int())


@triton.jit
def half_out_dot_kernel(a_ptr, b_ptr, c_ptr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a = tl.load(a_ptr + rm[:, None] * BK + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * BN + rn[None, :])
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], tl.dot(a, b, out_dtype=tl.float16))


def test_half_result_is_summed_in_fp32_and_rounded_once(target):
    # Triton's test_dot3d with out_dtype=float16: an fp16 running sum over k = 512 drifts by several ulps
    a = torch.randn(16, 512).half()
    b = torch.randn(512, 16).half()
    c = torch.empty(16, 16, dtype=torch.float16)
    half_out_dot_kernel[(1,)](a, b, c, BM=16, BN=16, BK=512)
    torch.testing.assert_close(c, (a.float() @ b.float()).half(), rtol=2**-10, atol=1e-2)


@triton.jit
def trans_reshape_kernel(x_ptr, t_ptr, r_ptr, M: tl.constexpr, N: tl.constexpr):
    rm = tl.arange(0, M)
    rn = tl.arange(0, N)
    x = tl.load(x_ptr + rm[:, None] * N + rn[None, :])
    xt = tl.trans(x)
    tl.store(t_ptr + rn[:, None] * M + rm[None, :], xt)
    flat = tl.reshape(x, (M * N,))
    tl.store(r_ptr + tl.arange(0, M * N), flat * 2.0)


def test_trans_and_reshape(target):
    x = torch.randn(8, 16)
    t = torch.empty(16, 8)
    r = torch.empty(128)
    trans_reshape_kernel[(1,)](x, t, r, M=8, N=16)
    torch.testing.assert_close(t, x.t())
    torch.testing.assert_close(r, x.reshape(-1) * 2)


# Dots of at least 16 x 16 x 16 go through the packed matmul (to_linalg/dot.py): every input type it
# widens, ragged edges, strided operands, an accumulator carried by the loop and updated in place, and a
# B loaded once before the loop (its panels packed once). B is read across its rows, as x @ W^T reads
# nn.Linear's weight: the last shape's whole fp32 tiles are packed straight from it, transposed in
# registers on x86 (smt_panels.pack_b).
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("m,n,k,bm,bn,bk", [(70, 45, 77, 32, 16, 32), (64, 64, 64, 64, 64, 16),
                                            (100, 200, 96, 32, 64, 32)])
def test_packed_matmul_paths(target, dtype, m, n, k, bm, bn, bk):
    a = torch.randn(m, k).to(dtype)
    b = torch.randn(n, k).to(dtype).t()      # strides (1, k)
    c = torch.empty(m, n)
    matmul_kernel[(triton.cdiv(m, bm), triton.cdiv(n, bn))](
        a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        BM=bm, BN=bn, BK=bk)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-4, atol=1e-4)


# Small tiles (8 x 32 x 8: triton-cpu's tutorials' fp32 blocks) take the packed matmul too; B's 32 columns
# are one AVX-512 panel there, read where they are when their columns have unit stride (row-major B, and its
# masked edge tiles, copied contiguous), packed otherwise: B read across its rows, and rows 4 KiB apart.
@pytest.mark.parametrize("layout", ["row-major", "transposed", "rows 4 KiB apart"])
@pytest.mark.parametrize("m,n,k", [(45, 70, 37), (64, 64, 64)])
def test_small_tiles(target, layout, m, n, k):
    a = torch.randn(m, k)
    if layout == "row-major":
        b = torch.randn(k, n)
    elif layout == "transposed":
        b = torch.randn(n, k).t()
    else:
        b = torch.randn(k, 1024)[:, :n]
    c = torch.empty(m, n)
    matmul_kernel[(triton.cdiv(m, 8), triton.cdiv(n, 32))](
        a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        BM=8, BN=32, BK=8)
    torch.testing.assert_close(c, a @ b, rtol=1e-4, atol=1e-4)


@triton.jit
def fixed_b_kernel(a_ptr, b_ptr, c_ptr, M, BM: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    rn = tl.arange(0, N)
    rk = tl.arange(0, K)
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
    for start in range(0, M, BM):
        rm = start + tl.arange(0, BM)
        a = tl.load(a_ptr + rm[:, None] * K + rk[None, :], mask=rm[:, None] < M, other=0.0)
        tl.store(c_ptr + rm[:, None] * N + rn[None, :], tl.dot(a, b) + 1.0, mask=rm[:, None] < M)


def test_packed_matmul_with_b_fixed_across_the_loop(target):
    a = torch.randn(75, 32)
    b = torch.randn(32, 64)
    c = torch.empty(75, 64)
    fixed_b_kernel[(1,)](a, b, c, 75, BM=16, N=64, K=32)
    torch.testing.assert_close(c, a @ b + 1.0, rtol=1e-4, atol=1e-4)


@triton.jit
def chained_fp8_dots_kernel(x_ptr, y_ptr, w_ptr, z_ptr):
    rm = tl.arange(0, 32)
    rk = tl.arange(0, 16)
    rn = tl.arange(0, 32)
    x = tl.load(x_ptr + rm[:, None] * 16 + rk[None, :])
    y = tl.load(y_ptr + rk[:, None] * 32 + rn[None, :])
    w = tl.load(w_ptr + rn[:, None] * 32 + rn[None, :])
    z = tl.dot(x, y)
    tl.store(z_ptr + rm[:, None] * 32 + rn[None, :], tl.dot(z.to(w.dtype), w))


def test_two_packed_dots_with_one_zero_accumulator(target):
    # Triton's test_dot "chain-dot" in fp8: both dots start from the same zeros, and the fp8 round trip
    # between them writes tiles in place; the second dot must still read zeros.
    g = torch.Generator().manual_seed(0)
    x, y, w = ((torch.rand(shape, generator=g) * 0.5).to(torch.float8_e5m2) for shape in ((32, 16), (16, 32), (32, 32)))
    z = torch.empty(32, 32)
    chained_fp8_dots_kernel[(1,)](x, y, w, z)
    expected = (x.float() @ y.float()).to(torch.float8_e5m2).float() @ w.float()
    torch.testing.assert_close(z, expected, rtol=1e-5, atol=1e-5)


@triton.jit
def accumulating_kernel(a_ptr, b_ptr, d_ptr, c_ptr, M, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """c = d + a @ b over one BM x BN block, every row of it stored: the accumulator starts as d's tile and
    A's rows past M are the load's zero padding."""
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.load(d_ptr + rm[:, None] * BN + rn[None, :])
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :], mask=rm[:, None] < M, other=0.0)
        b = tl.load(b_ptr + (k + rk)[:, None] * BN + rn[None, :])
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], acc)


@pytest.mark.parametrize("m", [0, 3, 17, 40, 64])
def test_rows_of_zero_padding_leave_the_accumulator_as_it_was(target, m):
    """The packed matmul skips register blocks of A's padding rows (PackedMatmul.row_bound): what they
    would add is zero, so those accumulator rows keep their value."""
    a = torch.randn(max(m, 1), 64)
    b = torch.randn(64, 32)
    d = torch.full((64, 32), 1.5)
    c = torch.empty(64, 32)
    accumulating_kernel[(1,)](a, b, d, c, m, 64, BM=64, BN=32, BK=32)
    expected = d.clone()
    expected[:m] += a[:m] @ b
    torch.testing.assert_close(c, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("m", [1, 5, 7, 9, 13, 40, 63])
@pytest.mark.parametrize("k", [64, 1024])
def test_rows_past_the_mask_are_never_read(target, m, k):
    """A's tile is read in place although the mask ends inside it (to_linalg/load.py): the packed matmul
    must read none of the rows past the mask, here NaN, and leave those accumulator rows as they were.
    The bound falls inside a register block for most m (6 rows on RVV, 8 on AVX-512); A's rows 4 KiB
    apart (k = 1024) are packed on x86 rather than read in place."""
    rows = torch.randn(64, k)
    rows[m:] = float("nan")
    a = rows[:m]
    b = torch.randn(k, 32)
    d = torch.full((64, 32), 1.5)
    c = torch.empty(64, 32)
    accumulating_kernel[(1,)](a, b, d, c, m, k, BM=64, BN=32, BK=32)
    expected = d.clone()
    expected[:m] += a @ b
    torch.testing.assert_close(c, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("m,k", [(5, 64), (13, 64), (40, 64), (9, 1024)])
def test_rows_past_the_mask_may_be_unmapped(m, k):
    """A ends where an inaccessible page begins: reading any row past the mask faults. On the host, where
    the kernel reads the argument's own memory (under QEMU it reads a copy of the ranges it may touch)."""
    from spine.driver import CPUDriver
    triton.runtime.driver.set_active(CPUDriver(target="host"))
    page = mmap.PAGESIZE
    size = m * k * 4
    pages = -(-size // page)
    region = mmap.mmap(-1, (pages + 1) * page)
    start = ctypes.c_char.from_buffer(region)
    address = ctypes.addressof(start)
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.mprotect(ctypes.c_void_p(address + pages * page), page, 0) == 0   # PROT_NONE
    try:
        memory = torch.frombuffer(region, dtype=torch.float32, count=pages * page // 4)
        a = memory[(pages * page - size) // 4:].view(m, k)
        a.copy_(torch.randn(m, k))
        b, d, c = torch.randn(k, 32), torch.full((64, 32), 1.5), torch.empty(64, 32)
        accumulating_kernel[(1,)](a, b, d, c, m, k, BM=64, BN=32, BK=32)
        expected = d.clone()
        expected[:m] += a @ b
        torch.testing.assert_close(c, expected, rtol=1e-4, atol=1e-4)
        del memory, a
    finally:
        libc.mprotect(ctypes.c_void_p(address + pages * page), page, mmap.PROT_READ | mmap.PROT_WRITE)
        del start


def test_accumulator_loaded_from_a_read_only_argument_is_updated_in_a_copy(target):
    """The accumulator starts as a tile read in place from d: the packed matmul, which updates its
    accumulator where it is, must get a copy of it and leave d alone."""
    a, b, d = torch.randn(64, 96), torch.randn(96, 64), torch.randn(64, 64)
    before = d.clone()
    c = torch.empty(64, 64)
    accumulating_kernel[(1,)](a, b, d, c, 64, 96, BM=64, BN=64, BK=32)
    torch.testing.assert_close(c, before + a @ b, rtol=1e-4, atol=1e-4)
    assert torch.equal(d, before)
