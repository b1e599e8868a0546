"""A tensor length that is not a power of 2: a compile error at the kernel's line that says how to write it,
and the kernel written that way gives spine-triton's answer."""
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
