"""The Triton kernels of a Llama decoder over GGUF-quantized weights, and the functions that launch them.

Weights stay in the file's blocks. A Q4_1 block is 20 bytes for 32 weights: an fp16 scale d, an fp16 minimum
m, then 16 bytes whose low nibbles are weights 0-15 and high nibbles weights 16-31; a weight is d * q + m.
A Q8_0 block is 34 bytes: an fp16 scale d and 32 int8 values; a weight is d * q. The kernels read the
blocks through views of the same bytes (uint8 for Q4_1's nibbles, int8 for Q8_0's values, fp16 for the
scales) and dequantize in registers. A block's dot product with activations x is d * sum(x * q) +
m * sum(x), so the minimum costs one multiply per block, not per weight.

Activations are fp32 [tokens, features], row-major. Every op of the forward pass is one of these kernels;
the host code only allocates."""
import math

import numpy as np
import torch
import triton
import triton.language as tl

QK = 32          # weights per block, both formats
Q4_1_BYTES = 20
Q8_0_BYTES = 34


@triton.jit
def _row_rstd(x_ptr, rm, M, K, stride_xm, eps, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):
    """1 / sqrt(mean(x^2) + eps) of rows rm, the RMSNorm factor, in a [BLOCK_M] vector."""
    total = tl.zeros([BLOCK_M], tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + tl.arange(0, BLOCK_K)
        x = tl.load(x_ptr + rm[:, None] * stride_xm + k[None, :], mask=(rm[:, None] < M) & (k[None, :] < K), other=0.0)
        total += tl.sum(x * x, axis=1)
    return 1.0 / tl.sqrt(total / K + eps)


@triton.jit
def _x_half(x_ptr, norm_ptr, rstd, rm, M, col, stride_xm, NORM: tl.constexpr):
    """Sixteen activations per row at columns `col` ([16]), RMS-normalised when NORM."""
    x = tl.load(x_ptr + rm[:, None] * stride_xm + col[None, :], mask=rm[:, None] < M, other=0.0)
    if NORM:
        x = x * rstd[:, None] * tl.load(norm_ptr + col)[None, :]
    return x


@triton.jit
def _q4_1_block(w_ptr, w16_ptr, rn, nmask, row_bytes, b):
    """Block b of Q4_1 rows rn (those in nmask; the others read as zeros): scales and minimums ([BLOCK_N],
    fp32) and the 16 bytes of nibbles ([BLOCK_N, 16], uint8)."""
    block = rn * row_bytes + b * 20
    d = tl.load(w16_ptr + block // 2, mask=nmask, other=0.0).to(tl.float32)
    m = tl.load(w16_ptr + block // 2 + 1, mask=nmask, other=0.0).to(tl.float32)
    q = tl.load(w_ptr + block[:, None] + 4 + tl.arange(0, 16)[None, :], mask=nmask[:, None], other=0)
    return d, m, q


@triton.jit
def _q4_1_tile(x_ptr, norm_ptr, w_ptr, w16_ptr, rm, rn, M, N, K, stride_xm, eps,
               NORM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """acc[m, n] = sum_k xn[m, k] * W[n, k] for W in Q4_1 rows, xn = rmsnorm(x) * norm when NORM."""
    row_bytes = (K // 32) * 20
    nmask = rn < N
    rstd = tl.zeros([BLOCK_M], tl.float32)
    if NORM:
        rstd = _row_rstd(x_ptr, rm, M, K, stride_xm, eps, BLOCK_M, 64)
    j = tl.arange(0, 16)
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for b in range(0, K // 32):
        d, m, q = _q4_1_block(w_ptr, w16_ptr, rn, nmask, row_bytes, b)
        lo = (q & 15).to(tl.float32)
        hi = (q >> 4).to(tl.float32)
        x_lo = _x_half(x_ptr, norm_ptr, rstd, rm, M, b * 32 + j, stride_xm, NORM)
        x_hi = _x_half(x_ptr, norm_ptr, rstd, rm, M, b * 32 + 16 + j, stride_xm, NORM)
        qdot = tl.dot(x_lo, tl.trans(lo)) + tl.dot(x_hi, tl.trans(hi))
        xsum = tl.sum(x_lo, axis=1) + tl.sum(x_hi, axis=1)
        acc += qdot * d[None, :] + xsum[:, None] * m[None, :]
    return acc


@triton.jit
def _store_tile(acc, res_ptr, y_ptr, rm, rn, M, N, stride_ym, RESIDUAL: tl.constexpr):
    """A product's tile of rows rm and columns rn into y_ptr (in bounds), plus the residual when RESIDUAL
    (res_ptr is not read otherwise)."""
    out = rm[:, None] * stride_ym + rn[None, :]
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    if RESIDUAL:
        acc += tl.load(res_ptr + out, mask=mask, other=0.0)
    tl.store(y_ptr + out, acc, mask=mask)


@triton.jit
def _silu_times(gate, up):
    """The MLP's gate: silu(gate) * up, as every swiglu kernel of both modes ends."""
    return gate / (1.0 + tl.exp(-gate)) * up


@triton.jit
def q4_1_matmul_kernel(x_ptr, norm_ptr, w_ptr, w16_ptr, res_ptr, y_ptr, M, N, K, stride_xm, stride_ym, eps,
                       NORM: tl.constexpr, RESIDUAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """y = xn @ W^T (+ res): a projection, with the RMSNorm before it and the residual add after it fused."""
    rn = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    rm = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    acc = _q4_1_tile(x_ptr, norm_ptr, w_ptr, w16_ptr, rm, rn, M, N, K, stride_xm, eps, NORM, BLOCK_M, BLOCK_N)
    _store_tile(acc, res_ptr, y_ptr, rm, rn, M, N, stride_ym, RESIDUAL)


@triton.jit
def q4_1_swiglu_kernel(x_ptr, norm_ptr, wg_ptr, wg16_ptr, wu_ptr, wu16_ptr, y_ptr, M, N, K, stride_xm, stride_ym,
                       eps, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """y = silu(xn @ Wg^T) * (xn @ Wu^T), xn = rmsnorm(x) * norm: the MLP's first half in one kernel."""
    rn = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    rm = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    gate = _q4_1_tile(x_ptr, norm_ptr, wg_ptr, wg16_ptr, rm, rn, M, N, K, stride_xm, eps, True, BLOCK_M, BLOCK_N)
    up = _q4_1_tile(x_ptr, norm_ptr, wu_ptr, wu16_ptr, rm, rn, M, N, K, stride_xm, eps, True, BLOCK_M, BLOCK_N)
    _store_tile(_silu_times(gate, up), y_ptr, y_ptr, rm, rn, M, N, stride_ym, False)


@triton.jit
def _x_blocks(x_ptr, blk):
    """The activations of blocks blk ([NB]) of one row, as their low and high halves ([NB, 16] each)."""
    at = blk[:, None] * 32 + tl.arange(0, 16)[None, :]
    return tl.load(x_ptr + at), tl.load(x_ptr + at + 16)


@triton.jit
def _q4_1_row_blocks(w_ptr, w16_ptr, row, K, blk):
    """Blocks blk ([NB]) of Q4_1 row `row`: their scales and minimums ([NB], fp32) and their 16 bytes of
    nibbles ([NB, 16], uint8)."""
    halves = row * (K // 32 * 10) + blk * 10
    d = tl.load(w16_ptr + halves).to(tl.float32)
    m = tl.load(w16_ptr + halves + 1).to(tl.float32)
    q = tl.load(w_ptr + row * (K // 32 * 20) + blk[:, None] * 20 + 4 + tl.arange(0, 16)[None, :])
    return d, m, q


@triton.jit
def _q4_1_span(x_ptr, w_ptr, w16_ptr, row, K, b_start, b_end, NB: tl.constexpr):
    """Row `row`'s dot product with x over blocks b_start .. b_end (a multiple of NB apart), NB blocks per
    step as [NB, 16] tiles. The accumulator keeps 16 lanes, reduced once at the end."""
    acc = tl.zeros([16], tl.float32)
    for b0 in range(b_start, b_end, NB):
        blk = b0 + tl.arange(0, NB)
        d, m, q = _q4_1_row_blocks(w_ptr, w16_ptr, row, K, blk)
        x_lo, x_hi = _x_blocks(x_ptr, blk)
        # a plain multiply and add: tl.fma here made LLVM vectorise across the NB blocks, 3x slower
        prod = (q & 15).to(tl.float32) * x_lo + (q >> 4).to(tl.float32) * x_hi
        # the minimum's share in the same 16 lanes: a sum of x per block would be a horizontal sum per block
        acc += tl.sum(prod * d[:, None] + (x_lo + x_hi) * m[:, None], axis=0)
    return tl.sum(acc, axis=0)


@triton.jit
def _q4_1_row_dot(x_ptr, w_ptr, w16_ptr, row, K, NB: tl.constexpr, NB_TAIL: tl.constexpr):
    """sum_k x[k] * W[row, k] for one row of a Q4_1 matrix: the decode step's product. Big steps of NB
    blocks, then the rest in steps of NB_TAIL: each step of a loop over tiles has a fixed cost, so fewer,
    larger steps are faster."""
    blocks = K // 32
    main = blocks - blocks % NB
    y = _q4_1_span(x_ptr, w_ptr, w16_ptr, row, K, 0, main, NB)
    return y + _q4_1_span(x_ptr, w_ptr, w16_ptr, row, K, main, blocks, NB_TAIL)


@triton.jit
def _program_rows(N, BLOCK_N: tl.constexpr):
    """The rows of the matrix this one-token program computes, first and end. It takes them one at a time,
    reading each row front to back, a stream the hardware prefetcher follows: taken as a tile of rows a
    step of blocks at a time, the rows' bytes were read in an order it did not follow, and the products
    waited on memory (bench/RESULTS.md)."""
    first = tl.program_id(0) * BLOCK_N
    return first, tl.minimum(first + BLOCK_N, N)


@triton.jit
def q4_1_gemv_kernel(x_ptr, w_ptr, w16_ptr, res_ptr, y_ptr, N, K, RESIDUAL: tl.constexpr, BLOCK_N: tl.constexpr,
                     NB: tl.constexpr, NB_TAIL: tl.constexpr):
    """y = x @ W^T (+ res) for one row of activations (normalised already where a norm comes first: in the
    kernel, every row would multiply by the norm again), BLOCK_N rows of W per program."""
    start, end = _program_rows(N, BLOCK_N)
    for row in range(start, end):
        y = _q4_1_row_dot(x_ptr, w_ptr, w16_ptr, row, K, NB, NB_TAIL)
        if RESIDUAL:
            y += tl.load(res_ptr + row)
        tl.store(y_ptr + row, y)


@triton.jit
def q4_1_swiglu_gemv_kernel(xn_ptr, wg_ptr, wg16_ptr, wu_ptr, wu16_ptr, y_ptr, N, K, BLOCK_N: tl.constexpr,
                            NB: tl.constexpr, NB_TAIL: tl.constexpr):
    """y = silu(xn @ Wg^T) * (xn @ Wu^T) for one row of normalised activations xn."""
    start, end = _program_rows(N, BLOCK_N)
    for row in range(start, end):
        gate = _q4_1_row_dot(xn_ptr, wg_ptr, wg16_ptr, row, K, NB, NB_TAIL)
        up = _q4_1_row_dot(xn_ptr, wu_ptr, wu16_ptr, row, K, NB, NB_TAIL)
        tl.store(y_ptr + row, _silu_times(gate, up))


@triton.jit
def _q8_0_row_blocks(w_ptr, w16_ptr, row, K, blk, j):
    """Blocks blk ([NB]) of Q8_0 row `row`: their scales ([NB], fp32) and where their values j ([J]) lie
    ([NB, J] byte offsets)."""
    d = tl.load(w16_ptr + row * (K // 32 * 17) + blk * 17).to(tl.float32)
    return d, row * (K // 32 * 34) + blk[:, None] * 34 + 2 + j[None, :]


@triton.jit
def _q8_0_span(xn_ptr, w_ptr, w16_ptr, row, K, b_start, b_end, NB: tl.constexpr):
    j = tl.arange(0, 32)
    acc = tl.zeros([32], tl.float32)
    for b0 in range(b_start, b_end, NB):
        blk = b0 + tl.arange(0, NB)
        d, at = _q8_0_row_blocks(w_ptr, w16_ptr, row, K, blk, j)
        x = tl.load(xn_ptr + blk[:, None] * 32 + j[None, :])
        acc += tl.sum(tl.load(w_ptr + at).to(tl.float32) * x * d[:, None], axis=0)
    return tl.sum(acc, axis=0)


@triton.jit
def _q8_0_block_sums(xn_ptr, w_ptr, w16_ptr, row, K):
    """Row `row`'s dot product a block a step, each block's products summed before its scale: on RVV a
    block's 32 lanes are one vector (see int8_kernels._q4_1_q8_block_sums)."""
    j = tl.arange(0, 32)
    total = tl.zeros([1], tl.float32)
    for b in range(0, K // 32):
        blk = b + tl.arange(0, 1)
        d, at = _q8_0_row_blocks(w_ptr, w16_ptr, row, K, blk, j)
        x = tl.load(xn_ptr + blk[:, None] * 32 + j[None, :])
        total += tl.sum(tl.load(w_ptr + at).to(tl.float32) * x, axis=1) * d
    return tl.sum(total, axis=0)


@triton.jit
def q8_0_gemv_kernel(xn_ptr, w_ptr, w16_ptr, y_ptr, N, K, BLOCK_N: tl.constexpr, NB: tl.constexpr,
                     NB_TAIL: tl.constexpr, BLOCK_SUMS: tl.constexpr):
    """y = xn @ W^T for one row of (already normalised) activations and W in Q8_0: the decode step's output
    head, BLOCK_N rows of W per program, in big steps of NB blocks and the rest in steps of NB_TAIL."""
    blocks = K // 32
    main = blocks - blocks % NB
    start, end = _program_rows(N, BLOCK_N)
    for row in range(start, end):
        if BLOCK_SUMS:
            y = _q8_0_block_sums(xn_ptr, w_ptr, w16_ptr, row, K)
        else:
            y = _q8_0_span(xn_ptr, w_ptr, w16_ptr, row, K, 0, main, NB)
            y += _q8_0_span(xn_ptr, w_ptr, w16_ptr, row, K, main, blocks, NB_TAIL)
        tl.store(y_ptr + row, y)


@triton.jit
def rmsnorm_kernel(x_ptr, norm_ptr, y_ptr, K, stride_xm, stride_ym, eps, BLOCK_K: tl.constexpr):
    """y = rmsnorm(x) * norm, one row per program."""
    row = tl.program_id(0)
    rstd = tl.sum(_row_rstd(x_ptr + row * stride_xm, tl.arange(0, 1), 1, K, 0, eps, 1, 64), axis=0)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + tl.arange(0, BLOCK_K)
        x = tl.load(x_ptr + row * stride_xm + k, mask=k < K, other=0.0)
        tl.store(y_ptr + row * stride_ym + k, x * rstd * tl.load(norm_ptr + k, mask=k < K, other=0.0), mask=k < K)


@triton.jit
def q8_0_matmul_kernel(x_ptr, norm_ptr, w_ptr, w16_ptr, y_ptr, M, N, K, stride_xm, stride_ym, eps,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """y = rmsnorm(x) * norm @ W^T for W in Q8_0 rows: the output head over the tied embedding."""
    rn = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    rm = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    nmask = rn < N
    row_bytes = (K // 32) * 34
    rstd = _row_rstd(x_ptr, rm, M, K, stride_xm, eps, BLOCK_M, 64)
    j = tl.arange(0, 32)
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for b in range(0, K // 32):
        block = rn * row_bytes + b * 34
        d = tl.load(w16_ptr + block // 2, mask=nmask, other=0.0).to(tl.float32)
        q = tl.load(w_ptr + block[:, None] + 2 + j[None, :], mask=nmask[:, None], other=0).to(tl.float32)
        x = _x_half(x_ptr, norm_ptr, rstd, rm, M, b * 32 + j, stride_xm, True)
        acc += tl.dot(x, tl.trans(q)) * d[None, :]
    tl.store(y_ptr + rm[:, None] * stride_ym + rn[None, :], acc, mask=(rm[:, None] < M) & nmask[None, :])


@triton.jit
def q8_0_embedding_kernel(ids_ptr, w_ptr, w16_ptr, y_ptr, K, stride_ym):
    """y[t] = row ids[t] of the Q8_0 table, dequantized."""
    t = tl.program_id(0)
    row = tl.load(ids_ptr + t).to(tl.int64)
    j = tl.arange(0, 32)
    row_bytes = (K // 32) * 34
    for b in range(0, K // 32):
        block = row * row_bytes + b * 34
        d = tl.load(w16_ptr + block // 2).to(tl.float32)
        q = tl.load(w_ptr + block + 2 + j).to(tl.float32)
        tl.store(y_ptr + t * stride_ym + b * 32 + j, q * d)


@triton.jit
def rope_kv_kernel(qkv_ptr, k_cache_ptr, v_cache_ptr, pos_ptr, stride_t, stride_ch, stride_cs, log_base,
                   N_HEADS: tl.constexpr, N_KV: tl.constexpr, HEAD_DIM: tl.constexpr):
    """For token t of a fused q|k|v row: rotate q in place and k into the cache (llama.cpp's "normal" RoPE,
    which turns adjacent pairs (2i, 2i + 1) by pos * base^(-2i / head_dim)), and copy v into the cache. The
    first token's position is read from pos_ptr, so that a replayed launch graph runs at the position now
    there."""
    t = tl.program_id(0)
    head = tl.program_id(1)  # 0 .. N_HEADS + N_KV - 1: q heads, then k heads
    pos = tl.load(pos_ptr) + t
    i = tl.arange(0, HEAD_DIM // 2)
    theta = pos.to(tl.float32) * tl.exp(-(2 * i).to(tl.float32) / HEAD_DIM * log_base)
    cos, sin = tl.cos(theta), tl.sin(theta)
    src = qkv_ptr + t * stride_t + head * HEAD_DIM
    x0 = tl.load(src + 2 * i)
    x1 = tl.load(src + 2 * i + 1)
    r0 = x0 * cos - x1 * sin
    r1 = x0 * sin + x1 * cos
    if head < N_HEADS:
        tl.store(src + 2 * i, r0)
        tl.store(src + 2 * i + 1, r1)
    else:
        kv = head - N_HEADS
        dst = k_cache_ptr + kv * stride_ch + pos * stride_cs
        cache_type = k_cache_ptr.dtype.element_ty
        tl.store(dst + 2 * i, r0.to(cache_type))
        tl.store(dst + 2 * i + 1, r1.to(cache_type))
        d = tl.arange(0, HEAD_DIM)
        v = tl.load(src + N_KV * HEAD_DIM + d)
        tl.store(v_cache_ptr + kv * stride_ch + pos * stride_cs + d, v.to(cache_type))


@triton.jit
def attention_kernel(q_ptr, k_cache_ptr, v_cache_ptr, o_ptr, T, pos_ptr, scale, stride_qt, stride_ot,
                     stride_ch, stride_cs, GROUP: tl.constexpr, HEAD_DIM: tl.constexpr,
                     BLOCK_T: tl.constexpr, BLOCK_S: tl.constexpr):
    """Causal attention of BLOCK_T queries of one head over the cache, keys 0 .. start_pos + t (start_pos
    read from pos_ptr), with the online softmax; query head h reads kv head h // GROUP (grouped-query
    attention)."""
    start_pos = tl.load(pos_ptr)
    h = tl.program_id(0)
    rt = tl.program_id(1) * BLOCK_T + tl.arange(0, BLOCK_T)
    d = tl.arange(0, HEAD_DIM)
    tmask = rt < T
    q = tl.load(q_ptr + rt[:, None] * stride_qt + h * HEAD_DIM + d[None, :], mask=tmask[:, None], other=0.0)
    q = q * scale
    pos = start_pos + rt
    kv = h // GROUP
    m_i = tl.full([BLOCK_T], -1.0e30, tl.float32)
    l_i = tl.zeros([BLOCK_T], tl.float32)
    acc = tl.zeros([BLOCK_T, HEAD_DIM], tl.float32)
    end = tl.minimum(start_pos + (tl.program_id(1) + 1) * BLOCK_T, start_pos + T)
    for s0 in range(0, end, BLOCK_S):
        rs = s0 + tl.arange(0, BLOCK_S)
        at = kv * stride_ch + rs[:, None] * stride_cs + d[None, :]
        smask = rs[:, None] < end
        k = tl.load(k_cache_ptr + at, mask=smask, other=0.0)
        v = tl.load(v_cache_ptr + at, mask=smask, other=0.0)
        scores = tl.dot(q, tl.trans(k))
        scores = tl.where(rs[None, :] <= pos[:, None], scores, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(scores, axis=1))
        p = tl.exp(scores - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p, v)
        m_i = m_new
    out = acc / l_i[:, None]
    tl.store(o_ptr + rt[:, None] * stride_ot + h * HEAD_DIM + d[None, :], out, mask=tmask[:, None])


@triton.jit
def _attention_f16(q_ptr, k_cache_ptr, v_cache_ptr, T, pos_ptr, scale, stride_qt, stride_ch, stride_cs,
                   GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_T: tl.constexpr):
    """attention_kernel's result over an fp16 cache ([BLOCK_T, HEAD_DIM]: head program_id(0), queries
    program_id(1) * BLOCK_T ...), computed as llama.cpp's CPU flash attention computes it over its default
    fp16 cache, one key at a time: the queries rounded to fp16, the scale applied to each product, the
    weighted sum of the values kept in fp16 (rounded after every key) and divided by the softmax's sum at the
    end. Rounding where llama.cpp rounds is what lets the int8 mode give its tokens."""
    start_pos = tl.load(pos_ptr)
    h = tl.program_id(0)
    rt = tl.program_id(1) * BLOCK_T + tl.arange(0, BLOCK_T)
    d = tl.arange(0, HEAD_DIM)
    tmask = rt < T
    q = tl.load(q_ptr + rt[:, None] * stride_qt + h * HEAD_DIM + d[None, :], mask=tmask[:, None], other=0.0)
    q = q.to(tl.float16).to(tl.float32)
    pos = start_pos + rt
    kv = h // GROUP
    m_i = tl.full([BLOCK_T], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_T], tl.float32)
    acc = tl.zeros([BLOCK_T, HEAD_DIM], tl.float32)
    end = tl.minimum(start_pos + (tl.program_id(1) + 1) * BLOCK_T, start_pos + T)
    for s in range(0, end):
        at = kv * stride_ch + s * stride_cs + d
        k = tl.load(k_cache_ptr + at).to(tl.float32)
        v = tl.load(v_cache_ptr + at).to(tl.float32)
        score = tl.sum(q * k[None, :], axis=1) * scale
        seen = s <= pos
        higher = seen & (score > m_i)
        # llama.cpp's two exponentials, exp(m_i - score) where the score is higher and exp(score - m_i)
        # where not, are both exp(-|score - m_i|): one per key, the same bits
        e = tl.exp(-tl.abs(score - m_i))
        ms = tl.where(higher, e, 1.0)
        vs = tl.where(higher, 1.0, tl.where(seen, e, 0.0))
        m_i = tl.where(higher, score, m_i)
        acc = (acc * ms[:, None]).to(tl.float16).to(tl.float32)
        acc = (acc + v[None, :] * vs[:, None]).to(tl.float16).to(tl.float32)
        l_i = l_i * ms + vs
    return acc / l_i[:, None]


@triton.jit
def attention_f16_kernel(q_ptr, k_cache_ptr, v_cache_ptr, o_ptr, T, pos_ptr, scale, stride_qt, stride_ot,
                         stride_ch, stride_cs, GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_T: tl.constexpr):
    """_attention_f16's result into o_ptr."""
    out = _attention_f16(q_ptr, k_cache_ptr, v_cache_ptr, T, pos_ptr, scale, stride_qt, stride_ch, stride_cs, GROUP,
                         HEAD_DIM, BLOCK_T)
    rt = tl.program_id(1) * BLOCK_T + tl.arange(0, BLOCK_T)
    d = tl.arange(0, HEAD_DIM)
    tl.store(o_ptr + rt[:, None] * stride_ot + tl.program_id(0) * HEAD_DIM + d[None, :], out, mask=(rt < T)[:, None])


@triton.jit
def argmax_kernel(x_ptr, out_ptr, N, BLOCK: tl.constexpr):
    """The index of the largest of x[0:N], the first one on ties (greedy decoding)."""
    best = tl.full([BLOCK], float("-inf"), tl.float32)
    where = tl.zeros([BLOCK], tl.int32)
    for n0 in range(0, N, BLOCK):
        n = n0 + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + n, mask=n < N, other=float("-inf"))
        better = x > best
        best = tl.where(better, x, best)
        where = tl.where(better, n, where)
    top = tl.max(best, axis=0)
    tl.store(out_ptr, tl.min(tl.where(best == top, where, N), axis=0))


# ---- launchers: allocate the output, pick the blocks, launch -------------------------------------------

class QuantMatrix:
    """A [rows, cols] matrix in GGUF blocks: `data` the bytes (uint8 [rows, cols / 32 * block bytes]), `values`
    the same bytes as the kernel reads the quants (uint8 nibbles for Q4_1, int8 for Q8_0), `halves` as fp16,
    where the scales are read from."""

    def __init__(self, kind: str, data: torch.Tensor, cols: int):
        block = {"Q4_1": Q4_1_BYTES, "Q8_0": Q8_0_BYTES}.get(kind)
        if block is None:
            raise ValueError(f"no kernel reads {kind} blocks (Q4_1 and Q8_0 only)")
        if cols % QK or data.dtype != torch.uint8 or data.shape[1] != cols // QK * block:
            raise ValueError(f"{kind} matrix of {cols} columns: expected uint8 rows of {cols // QK * block} bytes, "
                             f"got {data.dtype} {tuple(data.shape)}")
        self.kind, self.rows, self.cols = kind, data.shape[0], cols
        self.data = data.contiguous()
        self.values = self.data.view(torch.int8) if kind == "Q8_0" else self.data
        self.halves = self.data.view(torch.float16)

    @property
    def nbytes(self) -> int:
        return self.data.numel()


# tokens and matrix rows per program of a product over several tokens (one token takes the GEMV kernels)
PREFILL_BLOCKS = (16, 32)
GEMV_ROWS = 8  # rows of the matrix per program of a one-token product
GEMV_STEP = 16  # blocks per step of the one-token kernels' main loop


def _block_sums() -> bool:
    """Whether the one-token products of Q8_0 (and of both formats with int8 activations) sum each block
    whole, a block a step: for RISC-V code, whose vectors take a block's lanes best that way (bench/
    RESULTS.md); x86 code takes steps of GEMV_STEP blocks. The fp32 Q4_1 products keep their steps on both:
    summed per block they ran 4.5x the instructions."""
    target = getattr(triton.runtime.driver.active, "target", None)
    return target is not None and target.arch == "riscv64"


def _tail_step(k: int) -> int:
    """Blocks per step of the rest after the main loop: any power of two that divides it."""
    rest = (k // QK) % GEMV_STEP
    return rest & -rest if rest else 1


def linear(x, w: QuantMatrix, norm=None, residual=None, eps=0.0):
    """(rmsnorm(x) * norm if norm is given else x) @ w^T (+ residual)."""
    m, k = x.shape
    if k != w.cols:
        raise ValueError(f"activations of width {k} against a matrix of {w.cols} columns")
    if w.kind == "Q8_0" and (norm is None or residual is not None):
        raise ValueError("the Q8_0 kernel is the output head: rmsnorm first, no residual")
    y = torch.empty((m, w.rows), dtype=torch.float32)
    if m == 1:
        return _gemv(x, w, norm, residual, eps, y)
    bm, bn = PREFILL_BLOCKS
    grid = (triton.cdiv(w.rows, bn), triton.cdiv(m, bm))
    if w.kind == "Q8_0":
        q8_0_matmul_kernel[grid](x, norm, w.values, w.halves, y, m, w.rows, k, x.stride(0), y.stride(0), eps,
                                 BLOCK_M=bm, BLOCK_N=bn)
        return y
    # unused pointers get x: passing y would make the output overlap an input, which runs a copying variant
    q4_1_matmul_kernel[grid](x, x if norm is None else norm, w.data, w.halves, x if residual is None else residual,
                             y, m, w.rows, k, x.stride(0), y.stride(0), eps, NORM=norm is not None,
                             RESIDUAL=residual is not None, BLOCK_M=bm, BLOCK_N=bn)
    return y


def _gemv(x, w, norm, residual, eps, y):
    grid = (triton.cdiv(w.rows, GEMV_ROWS),)
    steps = dict(BLOCK_N=GEMV_ROWS, NB=GEMV_STEP, NB_TAIL=_tail_step(w.cols))
    xn = x if norm is None else _rmsnorm(x, norm, eps)
    if w.kind == "Q8_0":
        q8_0_gemv_kernel[grid](xn, w.values, w.halves, y, w.rows, w.cols, BLOCK_SUMS=_block_sums(), **steps)
        return y
    q4_1_gemv_kernel[grid](xn, w.data, w.halves, x if residual is None else residual, y, w.rows, w.cols,
                           RESIDUAL=residual is not None, **steps)
    return y


def _rmsnorm(x, norm, eps):
    """rmsnorm(x) * norm of one row, once before a one-token product: each of its programs would otherwise
    normalise again (the head has thousands)."""
    xn = torch.empty_like(x)
    rmsnorm_kernel[(1,)](x, norm, xn, x.shape[1], x.stride(0), xn.stride(0), eps, BLOCK_K=256)
    return xn


def swiglu(x, norm, gate: QuantMatrix, up: QuantMatrix, eps):
    """silu(rmsnorm(x) * norm @ gate^T) * (rmsnorm(x) * norm @ up^T)."""
    m, k = x.shape
    y = torch.empty((m, gate.rows), dtype=torch.float32)
    if m == 1:
        q4_1_swiglu_gemv_kernel[(triton.cdiv(gate.rows, GEMV_ROWS),)](
            _rmsnorm(x, norm, eps), gate.data, gate.halves, up.data, up.halves, y, gate.rows, k, BLOCK_N=GEMV_ROWS,
            NB=GEMV_STEP, NB_TAIL=_tail_step(k))
        return y
    bm, bn = PREFILL_BLOCKS
    grid = (triton.cdiv(gate.rows, bn), triton.cdiv(m, bm))
    q4_1_swiglu_kernel[grid](x, norm, gate.data, gate.halves, up.data, up.halves, y, m, gate.rows, k, x.stride(0),
                             y.stride(0), eps, BLOCK_M=bm, BLOCK_N=bn)
    return y


def embedding(ids, table: QuantMatrix):
    y = torch.empty((ids.numel(), table.cols), dtype=torch.float32)
    q8_0_embedding_kernel[(ids.numel(),)](ids, table.values, table.halves, y, table.cols, y.stride(0))
    return y


def _position(start_pos) -> torch.Tensor:
    """The first token's position as the kernels read it: an int32 [1] tensor (given, or made from an int)."""
    if isinstance(start_pos, torch.Tensor):
        if start_pos.dtype != torch.int32 or start_pos.numel() != 1:
            raise ValueError(f"a position tensor is int32 with one element, got {start_pos.dtype} "
                             f"{tuple(start_pos.shape)}")
        return start_pos
    return torch.from_numpy(np.array([start_pos], dtype=np.int32))


def rope_and_cache(qkv, k_cache, v_cache, start_pos, n_heads, n_kv, head_dim, rope_base):
    """Rotates the q part of qkv [T, (n_heads + 2 n_kv) * head_dim] in place; writes rotated k and v into the
    caches [n_kv, capacity, head_dim] at positions start_pos ... (an int, or an int32 [1] tensor holding it)."""
    t = qkv.shape[0]
    rope_kv_kernel[(t, n_heads + n_kv)](qkv, k_cache, v_cache, _position(start_pos), qkv.stride(0), k_cache.stride(0),
                                        k_cache.stride(1), math.log(rope_base), N_HEADS=n_heads, N_KV=n_kv,
                                        HEAD_DIM=head_dim)


def attention(qkv, k_cache, v_cache, start_pos, n_heads, n_kv, head_dim):
    """Causal grouped-query attention of the T queries in qkv over the cache's first start_pos + T keys (an
    fp32 cache, or an fp16 one read as llama.cpp reads it); start_pos an int or an int32 [1] tensor."""
    t = qkv.shape[0]
    out = torch.empty((t, n_heads * head_dim), dtype=torch.float32)
    block_t = 1 if t == 1 else 16
    grid = (n_heads, triton.cdiv(t, block_t))
    args = (qkv, k_cache, v_cache, out, t, _position(start_pos), head_dim ** -0.5, qkv.stride(0), out.stride(0),
            k_cache.stride(0), k_cache.stride(1))
    if k_cache.dtype == torch.float16:
        attention_f16_kernel[grid](*args, GROUP=n_heads // n_kv, HEAD_DIM=head_dim, BLOCK_T=block_t)
    else:
        attention_kernel[grid](*args, GROUP=n_heads // n_kv, HEAD_DIM=head_dim, BLOCK_T=block_t, BLOCK_S=32)
    return out


def argmax(x):
    out = torch.empty(1, dtype=torch.int32)
    argmax_kernel[(1,)](x, out, x.numel(), BLOCK=1024)
    return out
