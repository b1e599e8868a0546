"""Spine's changes to triton's frontend (spine/language/frontend.py): spine-triton's infinite paddings of
block-pointer loads; a tensor length that is not a power of 2, a compile error at the kernel's line that
says how to write it, and the kernel written that way gives spine-triton's answer."""
import math

import pytest
import torch
import triton
import triton.language as tl
from triton.compiler.errors import CompilationError


@triton.jit
def rows_kernel(x_ptr, y_ptr, M: tl.constexpr, N: tl.constexpr):
    offs = tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :]
    tl.store(y_ptr + offs, tl.load(x_ptr + offs) * 2)


@triton.jit
def masked_rows_kernel(x_ptr, y_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    rows, cols = tl.arange(0, BM)[:, None], tl.arange(0, BN)[None, :]
    mask = (rows < M) & (cols < N)
    tl.store(y_ptr + rows * N + cols, tl.load(x_ptr + rows * N + cols, mask=mask) * 2, mask=mask)


def test_the_error_names_the_limit_and_the_way_around(target):
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    with pytest.raises(CompilationError) as info:
        rows_kernel[(1,)](x, torch.empty_like(x), M=3, N=4)
    message = str(info.value)
    assert "tl.arange(0, M)" in message                                  # the kernel's own line
    assert "power of 2 (got 3)" in message and "triton.next_power_of_2(n)" in message


def test_the_way_around_works(target):
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    y = torch.empty_like(x)
    masked_rows_kernel[(1,)](x, y, 3, 4, BM=triton.next_power_of_2(3), BN=4)
    torch.testing.assert_close(y, x * 2)


@triton.jit
def padded_kernel(x_ptr, out_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr, PADDING: tl.constexpr):
    """The block at (0, 0), padded with PADDING past the tensor's edges, stored whole; and its row maxima."""
    block = tl.make_block_ptr(x_ptr, shape=(M, N), strides=(N, 1), offsets=(0, 0), block_shape=(BM, BN),
                              order=(1, 0))
    x = tl.load(block, boundary_check=(0, 1), padding_option=PADDING)
    offs = tl.arange(0, BM)[:, None] * BN + tl.arange(0, BN)[None, :]
    tl.store(out_ptr + offs, x)
    tl.store(out_ptr + BM * BN + tl.arange(0, BM), tl.max(x, axis=1))


@pytest.mark.parametrize("padding,value", [("neg_inf", float("-inf")), ("inf", float("inf")), ("nan", float("nan")),
                                           ("zero", 0.0)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_block_pointer_loads_pad_with_spine_tritons_options(target, padding, value, dtype):
    m, n, bm, bn = 5, 13, 8, 16
    x = -torch.rand(m, n).to(dtype) - 1          # all negative: zero padding would win the maxima
    out = torch.empty(bm * bn + bm, dtype=dtype)
    padded_kernel[(1,)](x, out, m, n, BM=bm, BN=bn, PADDING=padding)
    expected = torch.full((bm, bn), value, dtype=dtype)
    expected[:m, :n] = x
    torch.testing.assert_close(out[:bm * bn].view(bm, bn), expected, equal_nan=True)
    # tl.max ignores NaN (propagate_nan's default) unless a whole row is NaN
    maxima = expected.nan_to_num(nan=-math.inf, posinf=math.inf, neginf=-math.inf).max(dim=1).values
    maxima[expected.isnan().all(dim=1)] = float("nan")
    torch.testing.assert_close(out[bm * bn:], maxima, equal_nan=True)


@triton.jit
def int_padded_kernel(x_ptr, out_ptr, N, BN: tl.constexpr):
    block = tl.make_block_ptr(x_ptr, shape=(N,), strides=(1,), offsets=(0,), block_shape=(BN,), order=(0,))
    tl.store(out_ptr + tl.arange(0, BN), tl.load(block, boundary_check=(0,), padding_option="neg_inf"))


def test_an_infinite_padding_of_integers_is_refused(target):
    x = torch.arange(10, dtype=torch.int32)
    with pytest.raises(CompilationError, match="padding_option='neg_inf' is not supported for integer"):
        int_padded_kernel[(1,)](x, torch.empty(16, dtype=torch.int32), 10, BN=16)
