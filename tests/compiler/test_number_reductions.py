"""maxnum and minnum reductions assume no NaN while they count them, with the exact loop when they met one
(compiler/number_reductions.py): from IR text as the loops leave it, and tl.max / tl.min against NumPy's
nanmax / nanmin (NaN only when every value is NaN) on rows with NaN and infinities, on both targets."""
import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from spine.compiler.number_reductions import reduce_without_nans
from tests.compiler.ir_rewrites import rewritten
from tests.to_linalg.test_golden import filecheck

REDUCTION = """
func.func @k(%x: memref<1000xf32>, %acc: memref<f32>, %other: memref<1000xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c1000 = arith.constant 1000 : index
  scf.for %i = %c0 to %c1000 step %c1 {
    %v = memref.load %x[%i] : memref<1000xf32>
    %a = memref.load %acc[] : memref<f32>
    %m = COMBINE %a, %v fastmath<reassoc> : f32
    memref.store %m, %acc[] : memref<f32>
    ALSO
  }
  return
}
"""


def test_a_max_reduction_counts_nans_and_falls_back_to_the_loop_as_it_was():
    text = rewritten(REDUCTION.replace("COMBINE", "arith.maxnumf").replace("ALSO", ""), reduce_without_nans)
    filecheck(text, """
CHECK: %[[INIT:.*]] = memref.load %arg1[]
CHECK-NEXT: %[[NANS:.*]] = memref.alloca() : memref<i32>
CHECK-NEXT: %[[INIT_NAN:.*]] = arith.cmpf uno, %[[INIT]], %[[INIT]]
CHECK: scf.for
CHECK: %[[V:.*]] = memref.load %arg0
CHECK: %[[NAN:.*]] = arith.cmpf uno, %[[V]], %[[V]]
CHECK: arith.addi
CHECK: arith.maxnumf %{{.*}}, %[[V]] fastmath<reassoc,nnan,nsz>
CHECK: %[[COUNT:.*]] = memref.load %[[NANS]][]
CHECK: %[[SEEN:.*]] = arith.cmpi ne, %[[COUNT]]
CHECK: scf.if %[[SEEN]] {
CHECK-NEXT: memref.store %[[INIT]], %arg1[]
CHECK-NEXT: scf.for
CHECK: arith.maxnumf %{{.*}}, %{{.*}} fastmath<reassoc> : f32
""")


def test_a_min_reduction_likewise():
    text = rewritten(REDUCTION.replace("COMBINE", "arith.minnumf").replace("ALSO", ""), reduce_without_nans)
    assert "fastmath<reassoc,nnan,nsz>" in text
    assert text.count("arith.minnumf") == 2


def test_a_loop_that_writes_anything_else_is_left_alone():
    """Running it a second time would repeat the other write."""
    also = "memref.store %v, %other[%i] : memref<1000xf32>"
    source = REDUCTION.replace("COMBINE", "arith.maxnumf").replace("ALSO", also)
    text = rewritten(source, reduce_without_nans)
    assert "nnan" not in text and "scf.if" not in text


@triton.jit
def row_extremes_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=float("nan"))
    tl.store(out_ptr + row * 2, tl.max(x, axis=0))
    tl.store(out_ptr + row * 2 + 1, tl.min(x, axis=0))


def _rows_with_nans(n_cols: int) -> torch.Tensor:
    x = torch.randn(8, n_cols)
    x[1, 0] = float("nan")                     # NaN first
    x[2, n_cols // 2] = float("nan")           # NaN inside
    x[3, :] = float("nan")                     # all NaN: the result is NaN
    x[4, :] = float("-inf")                    # all -inf: max and min are -inf
    x[5, :] = float("nan")
    x[5, n_cols - 1] = float("-inf")           # NaN and one -inf: -inf
    x[6, :] = float("nan")
    x[6, 0] = float("inf")                     # NaN and one +inf: +inf
    x[7, ::2] = float("nan")
    return x


@pytest.mark.parametrize("n_cols", [1, 37, 128, 300])
def test_max_and_min_skip_nan_unless_all_are_nan(target, n_cols):
    x = _rows_with_nans(n_cols)
    out = torch.empty(8, 2)
    row_extremes_kernel[(8,)](x, out, n_cols, BLOCK=triton.next_power_of_2(n_cols))
    with np.errstate(invalid="ignore"), pytest.warns(RuntimeWarning):
        want = np.stack([np.nanmax(x.numpy(), axis=1), np.nanmin(x.numpy(), axis=1)], axis=1)
    torch.testing.assert_close(out, torch.from_numpy(want), equal_nan=True)


@triton.jit
def column_max_kernel(x_ptr, out_ptr, m, n, BM: tl.constexpr, BN: tl.constexpr):
    r = tl.arange(0, BM)[:, None]
    c = tl.arange(0, BN)[None, :]
    x = tl.load(x_ptr + r * n + c, mask=(r < m) & (c < n), other=float("nan"))
    tl.store(out_ptr + tl.arange(0, BN), tl.max(x, axis=0), mask=tl.arange(0, BN) < n)


def test_column_max_of_a_tile_with_nans(target):
    x = _rows_with_nans(20).t().contiguous()       # 20 x 8: the special rows are columns now
    out = torch.empty(8)
    column_max_kernel[(1,)](x, out, 20, 8, BM=32, BN=8)
    with np.errstate(invalid="ignore"), pytest.warns(RuntimeWarning):
        want = np.nanmax(x.numpy(), axis=0)
    torch.testing.assert_close(out, torch.from_numpy(want), equal_nan=True)
