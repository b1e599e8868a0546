"""int8 tl.dot of at most 4 rows on K1's matrix unit (to_linalg/ime_rows.py: a token's products in decoding),
under QEMU, where the kernel server emulates `smt.vmadot`: exact against torch for 1 to 4 rows (a ragged
count too), column counts that leave a last tile of fewer than 4, several segment loads along k, B as
tl.trans of a weight tile (read where it lies, or copied when its rows are not 8-byte aligned), as the
low or high nibbles of bytes, and as a plain [K, N] tile; the product alone, carried over k in place, and
added to an accumulator that stays alive."""
from __future__ import annotations

import glob
import os

import pytest
import torch
import triton
import triton.language as tl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.ops.test_matrix_unit import on_core

TRANSPOSED, LOW, HIGH, PLAIN = 0, 1, 2, 3


@pytest.fixture
def x60(monkeypatch):
    on_core(monkeypatch, "spacemit-x60")


@triton.jit
def rows_kernel(a_ptr, w_ptr, c_ptr, M, K, s_am, s_wn, s_cm, BM: tl.constexpr, BN: tl.constexpr,
                BK: tl.constexpr, B_FORM: tl.constexpr, CARRY: tl.constexpr):
    """c[:M, cols] = a @ W[cols]^T over K: each k step one dot of BM rows (masked past M) with B made from
    BN rows of W (B_FORM), carried over k in one accumulator (CARRY), or, in one step, added to what c
    holds (K == BK: an accumulator that is no loop's own, so the dot writes a new buffer)."""
    rm = tl.arange(0, BM)
    rn = tl.program_id(0) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    c_at = c_ptr + rm[:, None] * s_cm + rn[None, :]
    acc = tl.zeros((BM, BN), dtype=tl.int32)
    if not CARRY:
        acc = tl.load(c_at, mask=rm[:, None] < M, other=0)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * s_am + (k + rk)[None, :], mask=rm[:, None] < M, other=0)
        if B_FORM == 3:  # W given as B itself, [K, N] (w_ptr's rows run along k)
            b = tl.load(w_ptr + (k + rk)[:, None] * s_wn + rn[None, :])
        else:
            w = tl.load(w_ptr + rn[:, None] * s_wn + (k + rk)[None, :])
            if B_FORM == 1:
                b = tl.trans((w & 15).to(tl.int8))
            elif B_FORM == 2:
                b = tl.trans((w >> 4).to(tl.int8))
            else:
                b = tl.trans(w)
        if CARRY:
            acc += tl.dot(a, b)
        else:
            acc = tl.dot(a, b, acc, out_dtype=tl.int32)
    tl.store(c_at, acc, mask=rm[:, None] < M)


def _rows(a, w, bn, bk, form=TRANSPOSED, c=None, block_m=None):
    """a [M, K] int8 times W [N, K] (or, PLAIN, w = B [K, N]) through rows_kernel, added to c when given;
    N a multiple of bn."""
    m, k = a.shape
    n = w.shape[1] if form == PLAIN else w.shape[0]
    carry = c is None
    c = torch.empty(m, n, dtype=torch.int32) if c is None else c
    bm = block_m or triton.next_power_of_2(m)
    rows_kernel[(n // bn,)](a, w, c, m, k, a.stride(0), w.stride(0), c.stride(0), BM=bm, BN=bn, BK=bk,
                            B_FORM=form, CARRY=carry)
    return c


def _int8(*shape):
    return torch.randint(-128, 128, shape, dtype=torch.int8)


def _weights(form, n, k):
    """W as the kernel reads it and the int8 matrix it stands for ([N, K])."""
    if form in (LOW, HIGH):
        w = torch.randint(0, 256, (n, k), dtype=torch.uint8)
        return w, ((w & 15) if form == LOW else (w >> 4)).to(torch.int8)
    w = _int8(n, k)
    return (w.t().contiguous(), w) if form == PLAIN else (w, w)


@pytest.mark.parametrize("m, bn, k, bk", [(1, 16, 64, 32), (2, 8, 24, 8), (3, 2, 48, 16), (4, 16, 256, 128),
                                          (1, 2, 8, 8), (4, 8, 32, 32), (3, 16, 32, 16)])
@pytest.mark.parametrize("form", [TRANSPOSED, LOW, HIGH, PLAIN])
def test_a_few_rows_against_torch(x60, m, bn, k, bk, form):
    """bn = 2 leaves each program a last column tile of 2 (vl 2); bn = 8 and 16 are one and two iterations
    of two column tiles where k takes at most 4 tiles; bk = 128 is 16 k tiles, two segment loads of 8 and
    one column tile an iteration; m = 3 runs in a block of 4 rows whose last is masked."""
    torch.manual_seed(m * 1000 + bn * 10 + form)
    n = 3 * bn
    a = _int8(m, k)
    w, dense = _weights(form, n, k)
    torch.testing.assert_close(_rows(a, w, bn, bk, form), a.int() @ dense.int().t(), rtol=0, atol=0)


@pytest.mark.parametrize("m", [1, 4])
def test_added_to_an_accumulator_of_its_own(x60, m):
    """tl.dot(a, b, acc) with acc loaded, not carried by a loop: the sum goes to a new buffer."""
    torch.manual_seed(m)
    a, w = _int8(m, 32), _int8(12, 32)
    c = torch.randint(-2**20, 2**20, (m, 12), dtype=torch.int32)
    expected = c + a.int() @ w.int().t()
    torch.testing.assert_close(_rows(a, w, 4, 32, c=c), expected, rtol=0, atol=0)


def test_rows_that_are_not_8_byte_aligned(x60):
    """W's rows 41 bytes apart, and starting one byte into its storage: the segment loads read 8-byte
    elements, so B^T is copied into an aligned buffer first."""
    torch.manual_seed(1)
    a = _int8(1, 40)
    storage = _int8(8 * 41 + 1)
    w = storage[1:].view(8, 41)[:, :40]
    torch.testing.assert_close(_rows(a, w, 4, 8), a.int() @ w.int().t(), rtol=0, atol=0)


def test_extreme_values_sum_exactly(x60):
    a = torch.full((1, 256), -128, dtype=torch.int8)
    w = torch.full((8, 256), -128, dtype=torch.int8)
    assert _rows(a, w, 8, 256).eq(4_194_304).all()


def test_k_steps_of_fewer_than_8_stay_generic(x60, tmp_path, monkeypatch):
    """K = 4 is no whole tile of the instruction: the dot keeps the generic loops, and is still right."""
    monkeypatch.setenv("SPINE_TRITON_DUMP_PATH", str(tmp_path))
    monkeypatch.setenv("TRITON_ALWAYS_COMPILE", "1")
    a, w = _int8(1, 12), _int8(8, 12)
    torch.testing.assert_close(_rows(a, w, 8, 4), a.int() @ w.int().t(), rtol=0, atol=0)
    assert "spine_ime_rows" not in _assembly(tmp_path)


def _assembly(dump) -> str:
    [path] = glob.glob(os.path.join(dump, "rows_kernel.s"))
    with open(path) as f:
        return f.read()


@pytest.mark.parametrize("form, nibble", [(TRANSPOSED, None), (LOW, "vand.vi"), (HIGH, "vsrl.vi")])
def test_the_code_reads_w_in_place_and_runs_on_smt_vmadot(x60, tmp_path, monkeypatch, form, nibble):
    """One segment load fills the k tiles of 4 columns; the nibbles are taken in those registers."""
    monkeypatch.setenv("SPINE_TRITON_DUMP_PATH", str(tmp_path))
    monkeypatch.setenv("TRITON_ALWAYS_COMPILE", "1")
    a = _int8(1, 32)
    w, dense = _weights(form, 16, 32)
    torch.testing.assert_close(_rows(a, w, 16, 32, form), a.int() @ dense.int().t(), rtol=0, atol=0)
    text = _assembly(tmp_path)
    assert "spine_ime_rows" in text and "smt.vmadot" in text and "vlsseg4e64.v" in text
    if nibble:
        assert nibble in text


def test_counted_without_the_emulation(x60):
    """spine.count under QEMU: the matrix instructions trap into the kernel server's emulation, which QEMU's
    log leaves out (qemu.EMULATION_FUNCTIONS), so the count is the kernel's own: 16 column tiles of 4
    vmadots here, under 2,000 instructions in all where each emulated vmadot would add about 2,400. Nothing
    QEMU logged lies in the emulation's functions."""
    from spine.count.trace import traced_launch
    from spine.driver.qemu import _outside_the_emulation
    a, w = _int8(1, 32), _int8(64, 32)
    c = torch.empty(1, 64, dtype=torch.int32)
    trace = traced_launch(lambda: rows_kernel[(1,)](a, w, c, 1, 32, a.stride(0), w.stride(0), c.stride(0), BM=1,
                                                    BN=64, BK=32, B_FORM=TRANSPOSED, CARRY=True))
    torch.testing.assert_close(c, a.int() @ w.int().t(), rtol=0, atol=0)
    lo, hi = trace.text
    counted = sum(n for pc, n in trace.counts.items() if lo <= pc < hi)
    assert 64 < counted < 2_000
    kept = [[int(x, 16) for x in r.split("..")] for r in _outside_the_emulation()[1].split(",")]
    assert len(kept) >= 2
    assert all(any(lo <= pc <= hi for lo, hi in kept) for pc in trace.counts)   # nothing of the emulation


@settings(max_examples=12, derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(m=st.integers(1, 4), bn=st.sampled_from([1, 2, 4, 8, 16, 32]), bk=st.sampled_from([8, 16, 32, 64, 128]),
       steps=st.integers(1, 3), form=st.sampled_from([TRANSPOSED, LOW, HIGH, PLAIN]), programs=st.integers(1, 3),
       added=st.booleans(), skew=st.sampled_from([0, 0, 1, 3]), seed=st.integers(0, 2**16))
def test_random_row_products(x60, m, bn, bk, steps, form, programs, added, skew, seed):
    """Drawn shapes, B forms and alignments, exact against torch: the few rows' product fuzzed. `skew`
    shifts W's storage by that many bytes (its rows then start off 8-byte boundaries); `added` gives the
    dot an accumulator of its own (one k step)."""
    torch.manual_seed(seed)
    k, n = bk * (1 if added else steps), bn * programs
    a = _int8(m, k)
    w, dense = _weights(form, n, k)
    if skew and form != PLAIN:
        storage = torch.empty(w.numel() + skew, dtype=w.dtype)
        w = storage[skew:].view(w.shape).copy_(w)
    c = torch.randint(-2**20, 2**20, (m, n), dtype=torch.int32) if added else None
    expected = (c if added else 0) + a.int() @ dense.int().t()
    torch.testing.assert_close(_rows(a, w, bn, bk, form, c=c), expected, rtol=0, atol=0)


@triton.jit
def row_sums_kernel(a_ptr, w_ptr, out_ptr, M, K, s_am, s_wn, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """The column sums of a @ W^T over a block of BM rows whose rows past M are masked: they are zeros, and
    the sum reads every row of the product."""
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.int32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * s_am + (k + rk)[None, :], mask=rm[:, None] < M, other=0)
        w = tl.load(w_ptr + rn[:, None] * s_wn + (k + rk)[None, :])
        acc += tl.dot(a, tl.trans(w))
    tl.store(out_ptr + rn, tl.sum(acc, axis=0))


@pytest.mark.parametrize("m", [1, 3])
def test_rows_past_the_mask_are_zero(x60, m):
    """A's tile may be read in place past M, where memory holds the matrix's next rows (here: more of a):
    the product's rows there are still zero, as the masked load says."""
    torch.manual_seed(m)
    whole = _int8(4, 64)
    a, w = whole[:m], _int8(8, 64)
    out = torch.empty(8, dtype=torch.int32)
    row_sums_kernel[(1,)](a, w, out, m, 64, a.stride(0), w.stride(0), BM=4, BN=8, BK=32)
    torch.testing.assert_close(out, (a.int() @ w.int().t()).sum(0, dtype=torch.int32), rtol=0, atol=0)
