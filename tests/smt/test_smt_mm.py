"""spine-triton's smt matmul example (python/examples/test_smt_mm.py in spacemit-com/spine-triton, MIT
licensed), its kernel unchanged, in each of its arrangements: one program for the whole matrix, SPLIT_M
(sub-blocks of rows in a parallel loop), SPLIT_MN (sub-blocks of rows and columns, B staged in an smt.alloc
buffer, mbarriers) and SPLIT_K (a K loop accumulating `acc += smt.dot(a, b)` into a packed accumulator);
fp16 and fp32 with spine-triton's legal micro tiles, ragged M, N and K, against torch.mm."""
import importlib
import os
import sys

import pytest
import torch
import triton

# The kernel is examples/04_smt_matmul.py's, itself spine-triton's unchanged.
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
mm_kernel = importlib.import_module("04_smt_matmul").mm_kernel


MICRO = {torch.float16: (16, 8, 32), torch.float32: (8, 8, 16)}   # (MICRO_M, MICRO_K, MICRO_N)
SPLITS = {"single": dict(SPLIT_M=0, SPLIT_MN=0, SPLIT_K=1), "split_m": dict(SPLIT_M=1, SPLIT_MN=0, SPLIT_K=0),
          "split_mn": dict(SPLIT_M=0, SPLIT_MN=1, SPLIT_K=0), "split_k": dict(SPLIT_M=0, SPLIT_MN=0, SPLIT_K=1)}


def smt_mm(a, b, split: str, block_m: int = 32, block_n: int = 64, sub_k: int = 32):
    """The example's launcher, with the tile sizes as parameters; "single" is one program for everything."""
    (m, k), n = a.shape, b.shape[1]
    micro_m, micro_k, micro_n = MICRO[a.dtype]
    block_k = triton.next_power_of_2(k)
    if split == "single":
        block_m, block_n, sub_k = triton.next_power_of_2(m), triton.next_power_of_2(n), block_k
    c = torch.empty((m, n), dtype=a.dtype)
    grid = (triton.cdiv(m, block_m), triton.cdiv(n, block_n))
    mm_kernel[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                    BLOCK_SIZE_M=block_m, BLOCK_SIZE_N=block_n, BLOCK_SIZE_K=block_k, SUB_BLK_M=16,
                    SUB_BLK_N=max(32, micro_n), SUB_BLK_K=sub_k, MICRO_M=micro_m, MICRO_K=micro_k,
                    MICRO_N=micro_n, **SPLITS[split])
    return c


def check(c, a, b):
    expected = torch.mm(a.float(), b.float())
    if a.dtype == torch.float32:
        torch.testing.assert_close(c, expected, rtol=1e-4, atol=1e-4)
    else:
        torch.testing.assert_close(c.float(), expected, rtol=1e-2, atol=2e-2)
        torch.testing.assert_close(c, torch.mm(a, b), rtol=1e-2, atol=1e-1)   # the example's own check


@pytest.mark.parametrize("split", list(SPLITS))
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_smt_mm(target, split, dtype):
    m, n, k = 45, 70, 50
    a = torch.randn(m, k).to(dtype)
    b = torch.randn(k, n).to(dtype)
    check(smt_mm(a, b, split), a, b)


@pytest.mark.parametrize("split", ["split_m", "split_k"])
def test_smt_mm_strided_inputs(target, split):
    a = torch.randn(40, 33).t()          # strides (1, 33)
    b = torch.randn(80, 30)[::2]          # row stride 60
    check(smt_mm(a, b, split), a, b)


@pytest.mark.parametrize("split", ["split_mn", "split_k"])
def test_smt_mm_bounds_checked(target, split, monkeypatch):
    """With debug (every access checked against its argument's extent) the example still runs; its
    scratch buffer is not an argument and goes unchecked."""
    monkeypatch.setenv("TRITON_DEBUG", "1")
    a = torch.randn(45, 50)
    b = torch.randn(50, 70)
    check(smt_mm(a, b, split), a, b)
