"""The int8 mode's products as `tl.dot`s, for CPUs with a matrix unit that takes a token's row (K1's IME:
spine/to_linalg/ime_rows.py runs a dot of at most 4 rows on `smt.vmadot`).

A matrix instruction wants a block's 32 weights of a row as 32 bytes next to each other; Q4_1 keeps them as
16 bytes, weight j in the low nibble of byte j and weight j + 16 in its high nibble. So the Q4_1 matrices are
repacked once, at load time, into row pairs (`PairedQ4_1`): byte k of row n's block b holds weight k of row
n in its low nibble and weight k of row n + N/2 in its high nibble. Then `q & 15` is a [rows, 32] tile of
row n's weights and `q >> 4` the same of row n + N/2, and each is one dot whose B is `tl.trans` of the
tile: the compiler reads the bytes where they lie and takes the nibbles in registers. The scales and
minimums move to their own fp16 arrays, [blocks, N]; nothing else is kept, so the weights take the bytes
the GGUF's did. SpacemiT's llama.cpp kernels repack their Q4_1 weights at load time too.

The arithmetic is int8_kernels.py's (llama.cpp's): per block, the integer dot product of the weights and
the quantized activations, times both scales, plus the minimum times the activations' scaled sum.
The Q8_0 table (the token embedding and the output head) gets its values and scales apart (`SplitQ8_0`),
so that a row's 32 weights of a block start on an 8-byte boundary, where the dots read them."""
from dataclasses import dataclass

import numpy as np
import torch
import triton
import triton.language as tl

from .int8_kernels import QuantizedRows, _check, _quantized, _store_blocks, attention, quantize
from .kernels import QK, Q4_1_BYTES, Q8_0_BYTES, QuantMatrix, _silu_times, _store_tile

__all__ = ["attention", "embedding", "linear", "swiglu"]   # what a forward pass launches (model.SmolLM2.products)

PAIRED_BLOCKS = (16, 32)   # tokens and row pairs per program of a product over several tokens
GEMV_PAIRS = 32            # row pairs per program of a one-token product
HEAD_ROWS = 64             # rows of the head per program


@dataclass(frozen=True)
class PairedQ4_1:
    """A Q4_1 matrix [rows, cols] in row pairs: `pairs` uint8 [blocks, rows / 2, 32], `d` and `m` fp16
    [blocks, rows] (see the module's docstring)."""
    pairs: torch.Tensor
    d: torch.Tensor
    m: torch.Tensor
    rows: int
    cols: int
    kind: str = "Q4_1"

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.pairs, self.d, self.m))


@dataclass(frozen=True)
class SplitQ8_0:
    """A Q8_0 matrix [rows, cols] with its values and scales apart: `values` int8 [rows, cols], `d` fp16
    [blocks, rows]. A row's 32 weights of a block then start 32 bytes apart, where the dot's segment loads
    read them; in the GGUF's 34-byte blocks they start 2 bytes past an 8-byte boundary."""
    values: torch.Tensor
    d: torch.Tensor
    rows: int
    cols: int
    kind: str = "Q8_0"

    @property
    def nbytes(self) -> int:
        return self.values.numel() + self.d.numel() * self.d.element_size()


def split(w: QuantMatrix) -> SplitQ8_0:
    """`w` (Q8_0) with its values and scales apart."""
    if w.kind != "Q8_0":
        raise ValueError(f"a {w.kind} matrix: only Q8_0 splits")
    raw = w.data.numpy().reshape(w.rows, w.cols // QK, Q8_0_BYTES)
    d = raw[..., :2].copy().view(np.float16)[..., 0]
    values = np.ascontiguousarray(raw[..., 2:]).view(np.int8).reshape(w.rows, w.cols)
    return SplitQ8_0(torch.from_numpy(values), torch.from_numpy(np.ascontiguousarray(d.T)), w.rows, w.cols)


def matrix_rows() -> bool:
    """Whether the active target's compiler runs a token's int8 dots on a matrix unit (K1's IME; not with
    SPINE_MATRIX_UNIT=0): the int8 mode then repacks its Q4_1 matrices and launches these kernels."""
    from spine import switches
    from spine.microkernels import choose
    target = getattr(triton.runtime.driver.active, "target", None)
    return (target is not None and
            choose(target.triple, target.cpu, target.features, switches.MATRIX_UNIT.get()).int8 == "ime")


def pairs_fit(w: QuantMatrix) -> bool:
    """Whether `w` can be repacked: Q4_1 with its rows a multiple of 2 x GEMV_PAIRS (every program's pairs
    inside the matrix)."""
    return w.kind == "Q4_1" and w.rows % (2 * GEMV_PAIRS) == 0


def paired(w: QuantMatrix) -> PairedQ4_1:
    """`w` (Q4_1) repacked into row pairs."""
    if not pairs_fit(w):
        raise ValueError(f"{w.kind} matrix of {w.rows} rows: row pairs need Q4_1 and rows a multiple of "
                         f"{2 * GEMV_PAIRS}")
    blocks, half = w.cols // QK, w.rows // 2
    raw = w.data.numpy().reshape(w.rows, blocks, Q4_1_BYTES)
    scales = raw[..., :4].copy().view(np.float16)            # [rows, blocks, 2]: d, m
    quants = raw[..., 4:]
    weights = np.concatenate([quants & 15, quants >> 4], axis=-1)   # [rows, blocks, 32], in k order
    pairs = (weights[:half] | (weights[half:] << 4)).transpose(1, 0, 2)
    return PairedQ4_1(torch.from_numpy(np.ascontiguousarray(pairs)),
                      torch.from_numpy(np.ascontiguousarray(scales[..., 0].T)),
                      torch.from_numpy(np.ascontiguousarray(scales[..., 1].T)), w.rows, w.cols)


@triton.jit
def _paired_products(xq_ptr, xd_ptr, xs_ptr, q_ptr, d_ptr, m_ptr, rm, rn, M, N, K, BLOCK_M: tl.constexpr,
                     BLOCK_N: tl.constexpr):
    """The Q4_1 x Q8_1 products of quantized rows rm with weight rows rn ([BLOCK_N] of the first N / 2) and
    with rows rn + N / 2: two [BLOCK_M, BLOCK_N] fp32 tiles."""
    half = N // 2
    blocks = K // 32
    k = tl.arange(0, 32)
    acc_lo = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    acc_hi = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for b in range(0, blocks):
        q = tl.load(q_ptr + (b * half + rn[:, None]) * 32 + k[None, :])
        at = b * N + rn
        d_lo = tl.load(d_ptr + at).to(tl.float32)
        d_hi = tl.load(d_ptr + at + half).to(tl.float32)
        m_lo = tl.load(m_ptr + at).to(tl.float32)
        m_hi = tl.load(m_ptr + at + half).to(tl.float32)
        if BLOCK_M == 1:   # one token: a plain row, read in place, and its two scales as scalars
            x = tl.load(xq_ptr + b * 32 + k)[None, :]
            xd = tl.load(xd_ptr + b)
            xs = tl.load(xs_ptr + b)
            scale_lo, scale_hi = (d_lo * xd)[None, :], (d_hi * xd)[None, :]
            min_lo, min_hi = (m_lo * xs)[None, :], (m_hi * xs)[None, :]
        else:
            inside = rm < M
            x = tl.load(xq_ptr + rm[:, None] * K + b * 32 + k[None, :], mask=inside[:, None], other=0)
            xd = tl.load(xd_ptr + rm * blocks + b, mask=inside, other=0.0)
            xs = tl.load(xs_ptr + rm * blocks + b, mask=inside, other=0.0)
            scale_lo, scale_hi = xd[:, None] * d_lo[None, :], xd[:, None] * d_hi[None, :]
            min_lo, min_hi = xs[:, None] * m_lo[None, :], xs[:, None] * m_hi[None, :]
        lo = tl.dot(x, tl.trans((q & 15).to(tl.int8))).to(tl.float32)
        hi = tl.dot(x, tl.trans((q >> 4).to(tl.int8))).to(tl.float32)
        acc_lo += lo * scale_lo + min_lo
        acc_hi += hi * scale_hi + min_hi
    return acc_lo, acc_hi


@triton.jit
def paired_matmul_kernel(xq_ptr, xd_ptr, xs_ptr, q_ptr, d_ptr, m_ptr, res_ptr, y_ptr, M, N, K, stride_ym,
                         RESIDUAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """y = x @ W^T (+ res), W in row pairs: program (i, j) computes rows j's tokens against pairs i."""
    rn = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    rm = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    lo, hi = _paired_products(xq_ptr, xd_ptr, xs_ptr, q_ptr, d_ptr, m_ptr, rm, rn, M, N, K, BLOCK_M, BLOCK_N)
    _store_tile(lo, res_ptr, y_ptr, rm, rn, M, N, stride_ym, RESIDUAL)
    _store_tile(hi, res_ptr, y_ptr, rm, rn + N // 2, M, N, stride_ym, RESIDUAL)


@triton.jit
def paired_swiglu_kernel(xq_ptr, xd_ptr, xs_ptr, gq_ptr, gd_ptr, gm_ptr, uq_ptr, ud_ptr, um_ptr, y_ptr, yq_ptr,
                         yd_ptr, ys_ptr, M, N, K, stride_ym, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """y = silu(x @ Wg^T) * (x @ Wu^T), and y in int8 blocks for the down projection: a program's BLOCK_N
    (32) pairs make one block of y's first half and one of its second."""
    tl.static_assert(BLOCK_N == 32)
    rn = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    rm = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    g_lo, g_hi = _paired_products(xq_ptr, xd_ptr, xs_ptr, gq_ptr, gd_ptr, gm_ptr, rm, rn, M, N, K, BLOCK_M, BLOCK_N)
    u_lo, u_hi = _paired_products(xq_ptr, xd_ptr, xs_ptr, uq_ptr, ud_ptr, um_ptr, rm, rn, M, N, K, BLOCK_M, BLOCK_N)
    y_lo = _silu_times(g_lo, u_lo)
    y_hi = _silu_times(g_hi, u_hi)
    _store_tile(y_lo, y_ptr, y_ptr, rm, rn, M, N, stride_ym, False)
    _store_tile(y_hi, y_ptr, y_ptr, rm, rn + N // 2, M, N, stride_ym, False)
    _store_blocks(yq_ptr, yd_ptr, ys_ptr, y_lo, rm, tl.program_id(0), N, rm < M)
    _store_blocks(yq_ptr, yd_ptr, ys_ptr, y_hi, rm, tl.program_id(0) + N // 64, N, rm < M)


@triton.jit
def q8_0_q8_head_kernel(xq_ptr, xd_ptr, w_ptr, d_ptr, y_ptr, N, K, BLOCK_N: tl.constexpr):
    """y = x @ W^T for one quantized row and W in Q8_0 (the output head, SplitQ8_0), each block one dot of
    the row's int8 activations with BLOCK_N rows' 32 weights."""
    rn = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    k = tl.arange(0, 32)
    acc = tl.zeros([1, BLOCK_N], tl.float32)
    for b in range(0, K // 32):
        x = tl.load(xq_ptr + b * 32 + k)[None, :]
        w = tl.load(w_ptr + rn[:, None] * K + b * 32 + k[None, :])
        d = tl.load(d_ptr + b * N + rn).to(tl.float32)
        acc += tl.dot(x, tl.trans(w)).to(tl.float32) * (d * tl.load(xd_ptr + b))[None, :]
    tl.store(y_ptr + rn[None, :], acc)


@triton.jit
def q8_0_embedding_kernel(ids_ptr, w_ptr, d_ptr, y_ptr, N, K, stride_ym):
    """y[t] = row ids[t] of the table (SplitQ8_0), dequantized."""
    t = tl.program_id(0)
    row = tl.load(ids_ptr + t).to(tl.int64)
    j = tl.arange(0, 32)
    for b in range(0, K // 32):
        d = tl.load(d_ptr + b * N + row).to(tl.float32)
        q = tl.load(w_ptr + row * K + b * 32 + j).to(tl.float32)
        tl.store(y_ptr + t * stride_ym + b * 32 + j, q * d)


# ---- launchers -----------------------------------------------------------------------------------------

def linear(x, w, norm=None, residual=None, eps=0.0):
    """int8_kernels.linear for a matrix in row pairs (PairedQ4_1), or the Q8_0 head."""
    _check(x, w)
    xq = _quantized(x, norm, eps)
    m, k = xq.rows, w.cols
    y = torch.empty((m, w.rows), dtype=torch.float32)
    if isinstance(w, SplitQ8_0):
        if residual is not None or m != 1 or w.rows % HEAD_ROWS:
            raise ValueError(f"the Q8_0 head takes one row and no residual, its rows a multiple of {HEAD_ROWS}")
        q8_0_q8_head_kernel[(w.rows // HEAD_ROWS,)](xq.q, xq.d, w.values, w.d, y, w.rows, k, BLOCK_N=HEAD_ROWS)
        return y
    if not isinstance(w, PairedQ4_1):
        raise ValueError(f"a {w.kind} matrix in GGUF blocks: repack it first (paired, split)")
    res = xq.d if residual is None else residual   # not read without a residual
    bm, bn = (1, GEMV_PAIRS) if m == 1 else PAIRED_BLOCKS
    paired_matmul_kernel[(w.rows // 2 // bn, triton.cdiv(m, bm))](
        xq.q, xq.d, xq.s, w.pairs, w.d, w.m, res, y, m, w.rows, k, y.stride(0), RESIDUAL=residual is not None,
        BLOCK_M=bm, BLOCK_N=bn)
    return y


def embedding(ids, table: SplitQ8_0):
    """kernels.embedding for a table whose values and scales are apart."""
    y = torch.empty((ids.numel(), table.cols), dtype=torch.float32)
    q8_0_embedding_kernel[(ids.numel(),)](ids, table.values, table.d, y, table.rows, table.cols, y.stride(0))
    return y


def swiglu(x, norm, gate: PairedQ4_1, up: PairedQ4_1, eps) -> QuantizedRows:
    """int8_kernels.swiglu for matrices in row pairs."""
    _check(x, gate)
    _check(x, up)
    xq = quantize(x, norm, eps)
    m, k = xq.rows, gate.cols
    out = QuantizedRows.empty(m, gate.rows, torch.empty((m, gate.rows), dtype=torch.float32))
    bm = 1 if m == 1 else PAIRED_BLOCKS[0]
    paired_swiglu_kernel[(gate.rows // 2 // QK, triton.cdiv(m, bm))](
        xq.q, xq.d, xq.s, gate.pairs, gate.d, gate.m, up.pairs, up.d, up.m, out.values, out.q, out.d, out.s, m,
        gate.rows, k, out.values.stride(0), BLOCK_M=bm, BLOCK_N=QK)
    return out
