"""The products of the decoder over activations quantized to 8 bits, as llama.cpp computes them.

llama.cpp does not multiply its Q4_1 and Q8_0 weights by fp32 activations: it first quantizes each block
of 32 activations to int8 (its Q8_1 and Q8_0 formats) and takes integer dot products, which is what
integer SIMD (AVX-VNNI, RVV's vwmacc) and K1's IME want. This module computes the same arithmetic:

    quantize:  a = max |x| over the block,  d = fp16(a / 127),  q = rint(x * 127 / a)  (int8),
               s = fp16(d32 * sum(q))       (the block sum Q8_1 keeps for Q4_1's minimum)
    Q4_1 x Q8_1:  sum over blocks of  d_w * d * sum(q_w * q)  +  m_w * s
    Q8_0 x Q8_0:  sum over blocks of  d_w * d * sum(q_w * q)

d and s are rounded through fp16, as llama.cpp stores them; its x86 code scales by 127 / a and rounds to
nearest even (`_mm256_round_ps`), as here. The integer sums are exact, so a block's result differs from
llama.cpp's only in the order its fp32 sums are taken.

Each block's integer products are summed in pairs (weight j with j + 16, the low and the high nibble of
byte j) in int16, which cannot overflow (2 * 15 * 127 for Q4_1, 2 * 128 * 127 for Q8_0), then widened
once. Several tokens take `tl.dot` on int8 tiles, which the matrix-unit micro-kernels run."""
from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

from .kernels import embedding  # noqa: F401 (the embedding this mode's forward pass launches)
from .kernels import (GEMV_ROWS, GEMV_STEP, PREFILL_BLOCKS, QK, QuantMatrix, _attention_f16, _block_sums,
                      _position, _program_rows, _q4_1_block, _q4_1_row_blocks, _q8_0_row_blocks, _row_rstd,
                      _silu_times, _store_tile, _tail_step)


@triton.jit
def _quantized_blocks(x):
    """Rows of 32 activations x ([R, 32], fp32) as int8 blocks, as llama.cpp's quantize_row_q8_1 makes them:
    the values (whole numbers in fp32, [R, 32]), the scales d and the scaled sums s ([R], through fp16). Every
    kernel that quantizes does it here, so that fused and standalone quantizing give the same bits."""
    top = tl.max(tl.abs(x), axis=1)
    scale = tl.where(top != 0.0, 127.0 / top, 0.0)
    q = libdevice.rint(x * scale[:, None])
    d = top / 127.0
    return q, d.to(tl.float16).to(tl.float32), (d * tl.sum(q, axis=1)).to(tl.float16).to(tl.float32)


@triton.jit
def _store_blocks(q_ptr, d_ptr, s_ptr, x, rows, first_block, K, mask):
    """x ([R, 32]: rows `rows`' blocks first_block, each row's next) quantized into q [., K], d and s
    [., K / 32], the rows in `mask`."""
    q, d, s = _quantized_blocks(x)
    at = rows * (K // 32) + first_block
    tl.store(q_ptr + at[:, None] * 32 + tl.arange(0, 32)[None, :], q.to(tl.int8), mask=mask[:, None])
    tl.store(d_ptr + at, d, mask=mask)
    tl.store(s_ptr + at, s, mask=mask)


@triton.jit
def quantize_q8_kernel(x_ptr, norm_ptr, q_ptr, d_ptr, s_ptr, K, stride_xm, eps, NORM: tl.constexpr,
                       NB: tl.constexpr):
    """Row program_id(0) of x (RMS-normalised and scaled by norm when NORM) as int8 blocks q [K], their
    scales d [K / 32] and their scaled sums s [K / 32], NB blocks per step."""
    row = tl.program_id(0)
    x_row = x_ptr + row * stride_xm
    blocks = K // 32
    rstd = 0.0
    if NORM:
        rstd = tl.sum(_row_rstd(x_row, tl.arange(0, 1), 1, K, 0, eps, 1, 64), axis=0)
    for b0 in range(0, blocks, NB):
        blk = b0 + tl.arange(0, NB)
        at = blk[:, None] * 32 + tl.arange(0, 32)[None, :]
        mine = blk < blocks
        inside = mine[:, None]
        x = tl.load(x_row + at, mask=inside, other=0.0)
        if NORM:
            x = x * rstd * tl.load(norm_ptr + at, mask=inside, other=0.0)
        q, d, s = _quantized_blocks(x)
        tl.store(q_ptr + row * K + at, q.to(tl.int8), mask=inside)
        tl.store(d_ptr + row * blocks + blk, d, mask=mine)
        tl.store(s_ptr + row * blocks + blk, s, mask=mine)


@triton.jit
def _q4_1_q8_pairs(xq_ptr, q, blk, SUMS: tl.constexpr):
    """The pair sums of blocks blk ([NB]): weight j times activation j plus weight j + 16 times activation
    j + 16 ([NB, 16], of type SUMS), for the nibbles q ([NB, 16]) of the blocks' 16 bytes. In int16 they
    cannot overflow; in int32, summed per block, they are bytes widened once and multiplied, which the
    compiler runs on `vpdpbusd` on x86 with VNNI (spine/compiler/byte_dots.py: unsigned nibbles against
    signed activations, 64 products an instruction)."""
    at = blk[:, None] * 32 + tl.arange(0, 16)[None, :]
    x_lo = tl.load(xq_ptr + at).to(SUMS)
    x_hi = tl.load(xq_ptr + at + 16).to(SUMS)
    return (q & 15).to(SUMS) * x_lo + (q >> 4).to(SUMS) * x_hi


@triton.jit
def _q4_1_q8_span(xq_ptr, xd_ptr, xs_ptr, w_ptr, w16_ptr, row, K, b_start, b_end, NB: tl.constexpr,
                  BYTE_DOTS: tl.constexpr):
    """Row `row`'s Q4_1 x Q8_1 dot product over blocks b_start .. b_end, NB blocks a step. With BYTE_DOTS each
    block's integer dot product is summed whole in int32, then scaled; else the accumulator keeps 16 lanes
    (the int16 pair sums, scaled per block), reduced once at the end."""
    if BYTE_DOTS:
        acc = tl.zeros([NB], tl.float32)
    else:
        acc = tl.zeros([16], tl.float32)
    macc = tl.zeros([NB], tl.float32)
    for b0 in range(b_start, b_end, NB):
        blk = b0 + tl.arange(0, NB)
        d, m, q = _q4_1_row_blocks(w_ptr, w16_ptr, row, K, blk)
        scale = d * tl.load(xd_ptr + blk)
        if BYTE_DOTS:
            acc += tl.sum(_q4_1_q8_pairs(xq_ptr, q, blk, tl.int32), axis=1).to(tl.float32) * scale
        else:
            acc += tl.sum(_q4_1_q8_pairs(xq_ptr, q, blk, tl.int16).to(tl.float32) * scale[:, None], axis=0)
        macc += m * tl.load(xs_ptr + blk)
    return tl.sum(acc, axis=0) + tl.sum(macc, axis=0)


@triton.jit
def _q4_1_q8_block_sums(xq_ptr, xd_ptr, xs_ptr, w_ptr, w16_ptr, row, K):
    """Row `row`'s Q4_1 x Q8_1 dot product a block a step, each block's integer products summed whole before
    its scale, as llama.cpp's RVV code does (`vwredsum`). On RVV the block's lanes are then one vector: a
    widening multiply and one reduction a block, where _q4_1_q8_span's steps of 16 blocks come out as
    strided loads across the blocks (1.50 guest instructions a weight against 0.65 this way, bench/
    RESULTS.md). On x86 the span is the faster of the two."""
    total = tl.zeros([1], tl.float32)
    for b in range(0, K // 32):
        blk = b + tl.arange(0, 1)
        d, m, q = _q4_1_row_blocks(w_ptr, w16_ptr, row, K, blk)
        dot = tl.sum(_q4_1_q8_pairs(xq_ptr, q, blk, tl.int16).to(tl.int32), axis=1)
        total += dot.to(tl.float32) * (d * tl.load(xd_ptr + blk)) + m * tl.load(xs_ptr + blk)
    return tl.sum(total, axis=0)


@triton.jit
def _q4_1_q8_row_dot(xq_ptr, xd_ptr, xs_ptr, w_ptr, w16_ptr, row, K, NB: tl.constexpr, NB_TAIL: tl.constexpr,
                     BLOCK_SUMS: tl.constexpr, BYTE_DOTS: tl.constexpr):
    """Row `row`'s dot product: a block at a time with BLOCK_SUMS, else NB blocks a step and the rest NB_TAIL
    a step (BYTE_DOTS: as _q4_1_q8_span takes it)."""
    if BLOCK_SUMS:
        y = _q4_1_q8_block_sums(xq_ptr, xd_ptr, xs_ptr, w_ptr, w16_ptr, row, K)
    else:
        blocks = K // 32
        main = blocks - blocks % NB
        y = _q4_1_q8_span(xq_ptr, xd_ptr, xs_ptr, w_ptr, w16_ptr, row, K, 0, main, NB, BYTE_DOTS)
        y += _q4_1_q8_span(xq_ptr, xd_ptr, xs_ptr, w_ptr, w16_ptr, row, K, main, blocks, NB_TAIL, BYTE_DOTS)
    return y


@triton.jit
def q4_1_q8_gemv_kernel(xq_ptr, xd_ptr, xs_ptr, w_ptr, w16_ptr, res_ptr, y_ptr, N, K, RESIDUAL: tl.constexpr,
                        BLOCK_N: tl.constexpr, NB: tl.constexpr, NB_TAIL: tl.constexpr, BLOCK_SUMS: tl.constexpr,
                        BYTE_DOTS: tl.constexpr):
    """y = x @ W^T (+ res) for one quantized row of activations, BLOCK_N rows of W per program."""
    start, end = _program_rows(N, BLOCK_N)
    for row in range(start, end):
        y = _q4_1_q8_row_dot(xq_ptr, xd_ptr, xs_ptr, w_ptr, w16_ptr, row, K, NB, NB_TAIL, BLOCK_SUMS, BYTE_DOTS)
        if RESIDUAL:
            y += tl.load(res_ptr + row)
        tl.store(y_ptr + row, y)


@triton.jit
def q4_1_q8_swiglu_gemv_kernel(xq_ptr, xd_ptr, xs_ptr, wg_ptr, wg16_ptr, wu_ptr, wu16_ptr, y_ptr, yq_ptr, yd_ptr,
                               ys_ptr, N, K, BLOCK_N: tl.constexpr, NB: tl.constexpr, NB_TAIL: tl.constexpr,
                               BLOCK_SUMS: tl.constexpr, BYTE_DOTS: tl.constexpr, QUANTIZE: tl.constexpr):
    """y = silu(x @ Wg^T) * (x @ Wu^T) for one quantized row of activations; with QUANTIZE, also y in int8
    blocks (yq, yd, ys), for the product that follows: each program's BLOCK_N (32) values are one block."""
    start, end = _program_rows(N, BLOCK_N)
    for row in range(start, end):
        gate = _q4_1_q8_row_dot(xq_ptr, xd_ptr, xs_ptr, wg_ptr, wg16_ptr, row, K, NB, NB_TAIL, BLOCK_SUMS, BYTE_DOTS)
        up = _q4_1_q8_row_dot(xq_ptr, xd_ptr, xs_ptr, wu_ptr, wu16_ptr, row, K, NB, NB_TAIL, BLOCK_SUMS, BYTE_DOTS)
        tl.store(y_ptr + row, _silu_times(gate, up))
    if QUANTIZE:
        tl.static_assert(BLOCK_N == 32)
        y = tl.load(y_ptr + start + tl.arange(0, 32))  # this program's own stores, just above
        _store_blocks(yq_ptr, yd_ptr, ys_ptr, y[None, :], tl.arange(0, 1), start // 32, N, tl.full([1], 1, tl.int1))


@triton.jit
def _q4_1_q8_tile(xq_ptr, xd_ptr, xs_ptr, w_ptr, w16_ptr, rm, rn, M, N, K, BLOCK_M: tl.constexpr,
                  BLOCK_N: tl.constexpr):
    """acc[m, n] = Q4_1 x Q8_1 products of quantized rows rm with weight rows rn: per block, two int8
    `tl.dot`s (the low and the high nibbles against the block's two halves) into int32."""
    row_bytes = (K // 32) * 20
    blocks = K // 32
    mmask = rm < M
    nmask = rn < N
    j = tl.arange(0, 16)
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for b in range(0, blocks):
        d, m, q = _q4_1_block(w_ptr, w16_ptr, rn, nmask, row_bytes, b)
        at = rm[:, None] * K + b * 32 + j[None, :]
        x_lo = tl.load(xq_ptr + at, mask=mmask[:, None], other=0)
        x_hi = tl.load(xq_ptr + at + 16, mask=mmask[:, None], other=0)
        dots = tl.dot(x_lo, tl.trans((q & 15).to(tl.int8))) + tl.dot(x_hi, tl.trans((q >> 4).to(tl.int8)))
        xd = tl.load(xd_ptr + rm * blocks + b, mask=mmask, other=0.0)
        xs = tl.load(xs_ptr + rm * blocks + b, mask=mmask, other=0.0)
        acc += dots.to(tl.float32) * (xd[:, None] * d[None, :]) + xs[:, None] * m[None, :]
    return acc


@triton.jit
def q4_1_q8_matmul_kernel(xq_ptr, xd_ptr, xs_ptr, w_ptr, w16_ptr, res_ptr, y_ptr, M, N, K, stride_ym,
                          RESIDUAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rn = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    rm = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    acc = _q4_1_q8_tile(xq_ptr, xd_ptr, xs_ptr, w_ptr, w16_ptr, rm, rn, M, N, K, BLOCK_M, BLOCK_N)
    _store_tile(acc, res_ptr, y_ptr, rm, rn, M, N, stride_ym, RESIDUAL)


@triton.jit
def q4_1_q8_swiglu_kernel(xq_ptr, xd_ptr, xs_ptr, wg_ptr, wg16_ptr, wu_ptr, wu16_ptr, y_ptr, yq_ptr, yd_ptr, ys_ptr,
                          M, N, K, stride_ym, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, QUANTIZE: tl.constexpr):
    """The several-token swiglu; with QUANTIZE, also its result in int8 blocks: a tile's BLOCK_N (32) columns
    are one block of each of its rows."""
    rn = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    rm = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    gate = _q4_1_q8_tile(xq_ptr, xd_ptr, xs_ptr, wg_ptr, wg16_ptr, rm, rn, M, N, K, BLOCK_M, BLOCK_N)
    up = _q4_1_q8_tile(xq_ptr, xd_ptr, xs_ptr, wu_ptr, wu16_ptr, rm, rn, M, N, K, BLOCK_M, BLOCK_N)
    y = _silu_times(gate, up)
    _store_tile(y, y_ptr, y_ptr, rm, rn, M, N, stride_ym, False)
    if QUANTIZE:
        tl.static_assert(BLOCK_N == 32)
        _store_blocks(yq_ptr, yd_ptr, ys_ptr, y, rm, tl.program_id(0), N, rm < M)


@triton.jit
def attention_q8_kernel(q_ptr, k_cache_ptr, v_cache_ptr, oq_ptr, od_ptr, os_ptr, T, pos_ptr, scale, stride_qt,
                        N_OUT, stride_ch, stride_cs, GROUP: tl.constexpr, HEAD_DIM: tl.constexpr,
                        BLOCK_T: tl.constexpr):
    """The fp16-cache attention (kernels._attention_f16) with its output in int8 blocks, for the product that
    follows: a head's HEAD_DIM values are HEAD_DIM / 32 whole blocks of its rows of the [T, N_OUT] output."""
    out = _attention_f16(q_ptr, k_cache_ptr, v_cache_ptr, T, pos_ptr, scale, stride_qt, stride_ch, stride_cs, GROUP,
                         HEAD_DIM, BLOCK_T)
    per_head: tl.constexpr = HEAD_DIM // 32
    rt = tl.program_id(1) * BLOCK_T + tl.arange(0, BLOCK_T)
    rows = tl.reshape(tl.broadcast_to(rt[:, None], [BLOCK_T, per_head]), [BLOCK_T * per_head])
    first = tl.program_id(0) * per_head + tl.reshape(tl.broadcast_to(tl.arange(0, per_head)[None, :],
                                                                      [BLOCK_T, per_head]), [BLOCK_T * per_head])
    _store_blocks(oq_ptr, od_ptr, os_ptr, tl.reshape(out, [BLOCK_T * per_head, 32]), rows, first, N_OUT, rows < T)


@triton.jit
def _q8_0_q8_pairs(xq_ptr, xd_ptr, w_ptr, w16_ptr, row, K, blk):
    """Blocks blk ([NB]) of Q8_0 row `row` against the activations: the products of their scales ([NB],
    fp32) and the pair sums, weight j times activation j plus weight j + 16 times activation j + 16
    ([NB, 16], int16)."""
    j = tl.arange(0, 16)
    d, at = _q8_0_row_blocks(w_ptr, w16_ptr, row, K, blk, j)
    w_lo = tl.load(w_ptr + at).to(tl.int16)
    w_hi = tl.load(w_ptr + at + 16).to(tl.int16)
    x_at = blk[:, None] * 32 + j[None, :]
    pairs = w_lo * tl.load(xq_ptr + x_at).to(tl.int16) + w_hi * tl.load(xq_ptr + x_at + 16).to(tl.int16)
    return d * tl.load(xd_ptr + blk), pairs


@triton.jit
def _q8_0_q8_span(xq_ptr, xd_ptr, w_ptr, w16_ptr, row, K, b_start, b_end, NB: tl.constexpr):
    acc = tl.zeros([16], tl.float32)
    for b0 in range(b_start, b_end, NB):
        scale, pairs = _q8_0_q8_pairs(xq_ptr, xd_ptr, w_ptr, w16_ptr, row, K, b0 + tl.arange(0, NB))
        acc += tl.sum(pairs.to(tl.float32) * scale[:, None], axis=0)
    return tl.sum(acc, axis=0)


@triton.jit
def _q8_0_q8_block_sums(xq_ptr, xd_ptr, w_ptr, w16_ptr, row, K):
    """Row `row`'s Q8_0 x Q8_0 dot product a block a step, each block's integer products summed whole before
    its scale (as _q4_1_q8_block_sums, for RVV)."""
    total = tl.zeros([1], tl.float32)
    for b in range(0, K // 32):
        scale, pairs = _q8_0_q8_pairs(xq_ptr, xd_ptr, w_ptr, w16_ptr, row, K, b + tl.arange(0, 1))
        total += tl.sum(pairs.to(tl.int32), axis=1).to(tl.float32) * scale
    return tl.sum(total, axis=0)


@triton.jit
def q8_0_q8_gemv_kernel(xq_ptr, xd_ptr, w_ptr, w16_ptr, y_ptr, N, K, BLOCK_N: tl.constexpr, NB: tl.constexpr,
                        NB_TAIL: tl.constexpr, BLOCK_SUMS: tl.constexpr):
    """y = x @ W^T for one quantized row and W in Q8_0: the output head, BLOCK_N rows of W per program."""
    blocks = K // 32
    main = blocks - blocks % NB
    start, end = _program_rows(N, BLOCK_N)
    for row in range(start, end):
        if BLOCK_SUMS:
            y = _q8_0_q8_block_sums(xq_ptr, xd_ptr, w_ptr, w16_ptr, row, K)
        else:
            y = _q8_0_q8_span(xq_ptr, xd_ptr, w_ptr, w16_ptr, row, K, 0, main, NB)
            y += _q8_0_q8_span(xq_ptr, xd_ptr, w_ptr, w16_ptr, row, K, main, blocks, NB_TAIL)
        tl.store(y_ptr + row, y)


# ---- launchers -----------------------------------------------------------------------------------------

QUANTIZE_STEP = 8  # blocks per step of the quantizing kernel


@dataclass(frozen=True)
class QuantizedRows:
    """Activations [rows, cols] as int8 blocks: `q` int8 [rows, cols], `d` and `s` fp32 [rows, cols / 32]; and
    `values`, the fp32 activations they were made from, where a kernel kept them."""
    q: torch.Tensor
    d: torch.Tensor
    s: torch.Tensor
    values: torch.Tensor | None = None

    @property
    def rows(self) -> int:
        return self.q.shape[0]

    @property
    def cols(self) -> int:
        return self.q.shape[1]

    @classmethod
    def empty(cls, rows: int, cols: int, values: torch.Tensor | None = None) -> "QuantizedRows":
        if cols % QK:
            raise ValueError(f"activations of width {cols}: a multiple of {QK} is needed")
        return cls(torch.empty((rows, cols), dtype=torch.int8), torch.empty((rows, cols // QK), dtype=torch.float32),
                   torch.empty((rows, cols // QK), dtype=torch.float32), values)


def quantize(x, norm=None, eps=0.0) -> QuantizedRows:
    """x [M, K] fp32 (rmsnorm(x) * norm when norm is given) in int8 blocks of 32."""
    m, k = x.shape
    out = QuantizedRows.empty(m, k)
    quantize_q8_kernel[(m,)](x, x if norm is None else norm, out.q, out.d, out.s, k, x.stride(0), eps,
                             NORM=norm is not None, NB=QUANTIZE_STEP)
    return out


def _quantized(x, norm, eps) -> QuantizedRows:
    """The activations of a product: x itself when a kernel before it quantized them already, else quantized
    now (after the RMSNorm, when norm is given)."""
    if isinstance(x, QuantizedRows):
        if norm is not None:
            raise ValueError("activations quantized already cannot be normalised: pass them unquantized")
        return x
    return quantize(x, norm, eps)


def _byte_dots() -> bool:
    """Whether the one-token Q4_1 products sum each block's integer products whole, NB blocks a step
    (_q4_1_q8_span's BYTE_DOTS): for x86 CPUs with `vpdpbusd` (AVX512-VNNI, AVX-VNNI), on which the compiler runs
    those sums. Without it the int16 pair sums are faster; RISC-V code takes a block a step (_block_sums)."""
    from spine.targets import byte_dot_lanes
    target = getattr(triton.runtime.driver.active, "target", None)
    return target is not None and byte_dot_lanes(target.triple, target.cpu, target.features) > 0


def _check(x, w: QuantMatrix):
    """Before anything is quantized: x's width is w's."""
    width = x.cols if isinstance(x, QuantizedRows) else x.shape[1]
    if width != w.cols:
        raise ValueError(f"activations of width {width} against a matrix of {w.cols} columns")


def linear(x, w: QuantMatrix, norm=None, residual=None, eps=0.0):
    """(rmsnorm(x) * norm if norm is given else x) @ w^T (+ residual), the activations quantized first (x
    may come quantized: QuantizedRows)."""
    _check(x, w)
    xq = _quantized(x, norm, eps)
    if w.kind == "Q8_0" and (residual is not None or xq.rows != 1):
        raise ValueError("the Q8_0 kernel is the output head: one row, no residual")
    m, k = xq.rows, w.cols
    y = torch.empty((m, w.rows), dtype=torch.float32)
    steps = dict(BLOCK_N=GEMV_ROWS, NB=GEMV_STEP, NB_TAIL=_tail_step(k), BLOCK_SUMS=_block_sums())
    if w.kind == "Q8_0":
        q8_0_q8_gemv_kernel[(triton.cdiv(w.rows, GEMV_ROWS),)](xq.q, xq.d, w.values, w.halves, y, w.rows, k, **steps)
        return y
    res = xq.d if residual is None else residual   # not read without a residual
    if m == 1:
        q4_1_q8_gemv_kernel[(triton.cdiv(w.rows, GEMV_ROWS),)](xq.q, xq.d, xq.s, w.data, w.halves, res, y, w.rows, k,
                                                             RESIDUAL=residual is not None, BYTE_DOTS=_byte_dots(),
                                                             **steps)
        return y
    bm, bn = PREFILL_BLOCKS
    q4_1_q8_matmul_kernel[(triton.cdiv(w.rows, bn), triton.cdiv(m, bm))](
        xq.q, xq.d, xq.s, w.data, w.halves, res, y, m, w.rows, k, y.stride(0), RESIDUAL=residual is not None,
        BLOCK_M=bm, BLOCK_N=bn)
    return y


def swiglu(x, norm, gate: QuantMatrix, up: QuantMatrix, eps) -> QuantizedRows:
    """silu(xn @ gate^T) * (xn @ up^T), xn = rmsnorm(x) * norm quantized once for both; the result comes in
    int8 blocks (quantized by the same kernel, for the down projection) with its fp32 values."""
    _check(x, gate)
    _check(x, up)
    xq = quantize(x, norm, eps)
    m, k = xq.rows, gate.cols
    out = QuantizedRows.empty(m, gate.rows, torch.empty((m, gate.rows), dtype=torch.float32))
    weights = (gate.data, gate.halves, up.data, up.halves)
    if m == 1:
        # a program's rows make one block of the result
        q4_1_q8_swiglu_gemv_kernel[(triton.cdiv(gate.rows, QK),)](
            xq.q, xq.d, xq.s, *weights, out.values, out.q, out.d, out.s, gate.rows, k, BLOCK_N=QK, NB=GEMV_STEP,
            NB_TAIL=_tail_step(k), BLOCK_SUMS=_block_sums(), BYTE_DOTS=_byte_dots(), QUANTIZE=True)
        return out
    bm, bn = PREFILL_BLOCKS
    q4_1_q8_swiglu_kernel[(triton.cdiv(gate.rows, bn), triton.cdiv(m, bm))](
        xq.q, xq.d, xq.s, *weights, out.values, out.q, out.d, out.s, m, gate.rows, k, out.values.stride(0),
        BLOCK_M=bm, BLOCK_N=bn, QUANTIZE=True)
    return out


def attention(qkv, k_cache, v_cache, start_pos, n_heads, n_kv, head_dim) -> QuantizedRows:
    """kernels.attention over the fp16 cache, its output in int8 blocks (for the output projection) made by
    the attention kernel itself."""
    if k_cache.dtype != torch.float16 or head_dim % QK:
        raise ValueError(f"the int8 mode's attention reads an fp16 cache with heads of a multiple of {QK} values")
    t = qkv.shape[0]
    out = QuantizedRows.empty(t, n_heads * head_dim)
    block_t = 1 if t == 1 else 16
    attention_q8_kernel[(n_heads, triton.cdiv(t, block_t))](
        qkv, k_cache, v_cache, out.q, out.d, out.s, t, _position(start_pos), head_dim ** -0.5, qkv.stride(0),
        n_heads * head_dim, k_cache.stride(0), k_cache.stride(1), GROUP=n_heads // n_kv, HEAD_DIM=head_dim,
        BLOCK_T=block_t)
    return out
