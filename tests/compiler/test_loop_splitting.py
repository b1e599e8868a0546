"""Loops split where a comparison of their index with a bound changes value (compiler/loop_splitting.py):
which comparisons split a loop, from loop IR text; and kernels selecting by masks of every form compute
what torch does, on both targets, for bounds below, inside and past their tiles."""
import pytest
import torch
import triton
import triton.language as tl

from spine.compiler.loop_splitting import split_loops_at_bounds
from tests.compiler.ir_rewrites import rewritten
from tests.to_linalg.test_golden import filecheck

LOOP = """
func.func @k(%x: memref<1024xf32>, %out: memref<1024xf32>, %n: i32, %m: index, %off: index, %lo: index, %hi: index,
             %shift: i32) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c1024 = arith.constant 1024 : index
  %zero = arith.constant 0.0 : f32
  scf.for %i = LB to UB step %c1 {
    %v = memref.load %x[%i] : memref<1024xf32>
    CONDITION
    %r = arith.select %c, %v, %zero : f32
    memref.store %r, %out[%i] : memref<1024xf32>
  }
  return
}
"""


def split(condition: str, lb: str = "%c0", ub: str = "%c1024") -> str:
    text = LOOP.replace("CONDITION", condition).replace("LB", lb).replace("UB", ub)
    return rewritten(text, split_loops_at_bounds)


def test_a_cast_index_below_a_bound_splits_the_loop_there():
    text = split("%j = arith.index_cast %i : index to i32\n    %c = arith.cmpi slt, %j, %n : i32")
    filecheck(text, """
    CHECK: %[[N:.*]] = arith.index_cast %arg2 : i32 to index
    CHECK: %[[LOW:.*]] = arith.minsi %[[N]], %c1024
    CHECK: %[[AT:.*]] = arith.maxsi %[[LOW]], %c0
    CHECK: scf.for %{{.*}} = %c0 to %[[AT]] step %c1
    CHECK: arith.select %true
    CHECK: scf.for %{{.*}} = %[[AT]] to %c1024 step %c1
    CHECK: arith.select %false
    """)
    assert "arith.cmpi" not in text


@pytest.mark.parametrize("condition, point, below", [
    ("%c = arith.cmpi sge, %i, %m : index", "%arg3", False),                  # i >= m: false below m
    ("%c = arith.cmpi sgt, %m, %i : index", "%arg3", True),                   # m > i: i < m
    ("%c = arith.cmpi sle, %i, %m : index", "m + 1", True),                   # i <= m: i < m + 1
    ("%k = arith.addi %i, %off : index\n    %c = arith.cmpi slt, %k, %m : index", "m - off", True),
])
def test_each_form_of_comparison_splits_at_its_own_point(condition, point, below):
    text = split(condition)
    assert text.count("scf.for") == 2 and "arith.cmpi" not in text
    first, second = text.split("scf.for")[1:3]
    assert ("%true" in first) == below and ("%false" in second) == below
    if point == "m + 1":
        assert "arith.addi %arg3, %c1" in text
    elif point == "m - off":
        assert "arith.subi %arg3, %arg4" in text


@pytest.mark.parametrize("condition, lb, ub", [
    ("%c = arith.cmpf olt, %v, %zero : f32", "%c0", "%c1024"),                 # not the index
    ("%c = arith.cmpi slt, %m, %off : index", "%c0", "%c1024"),               # no index in it
    ("%c = arith.cmpi eq, %i, %m : index", "%c0", "%c1024"),                  # equality: one lane
    # the index through an integer and back: a round trip through i32 is not the index
    ("%j = arith.index_cast %i : index to i32\n    %w = arith.index_cast %j : i32 to index\n"
     "    %c = arith.cmpi slt, %w, %m : index", "%c0", "%c1024"),
    # an unsigned comparison with an offset, which could wrap below zero
    ("%k = arith.addi %i, %off : index\n    %c = arith.cmpi ult, %k, %m : index", "%c0", "%c1024"),
])
def test_comparisons_that_do_not_split(condition, lb, ub):
    text = split(condition, lb, ub)
    assert text.count("scf.for") == 1 and "arith.cmp" in text


@pytest.mark.parametrize("condition, lb, ub", [
    # a cast of indices the loop's dynamic bounds could take past the i32 range
    ("%j = arith.index_cast %i : index to i32\n    %c = arith.cmpi slt, %j, %n : i32", "%lo", "%hi"),
    # pid * BLOCK + arange < n: an offset added in i32, which could wrap
    ("%j = arith.index_cast %i : index to i32\n    %k = arith.addi %shift, %j : i32\n"
     "    %c = arith.cmpi slt, %k, %n : i32", "%c0", "%c1024"),
])
def test_a_narrow_comparison_splits_behind_a_check_with_the_loop_as_it_was_beside(condition, lb, ub):
    filecheck(split(condition, lb, ub), """
    CHECK: arith.cmpi sge
    CHECK: arith.cmpi sle
    CHECK: scf.if
    CHECK: scf.for
    CHECK: arith.select %true
    CHECK: scf.for
    CHECK: arith.select %false
    CHECK: } else {
    CHECK: scf.for
    CHECK: arith.cmpi slt
    CHECK: arith.select %
    """)


def test_a_loop_splits_at_most_twice():
    conditions = "\n    ".join(f"%b{k} = arith.cmpi slt, %i, {bound} : index"
                                  for k, bound in enumerate(("%m", "%off", "%lo")))
    text = split(conditions + "\n    %a = arith.andi %b0, %b1 : i1\n    %c = arith.andi %a, %b2 : i1")
    assert text.count("scf.for") == 4 and text.count("arith.cmpi") == 4   # the third left in each part


MASK_FORMS = """
func.func @k(%x: memref<1024xf32>, %out: memref<1024xf32>, %n: i32, %m: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c1024 = arith.constant 1024 : index
  %clamp = arith.constant CLAMP : index
  %zero = arith.constant 0.0 : f32
  %w = arith.index_cast %n : i32 to index
  %low = arith.minsi %w, %clamp : index
  %window = arith.maxsi %low, %c0 : index
  scf.for %i = %c0 to %c1024 step %c1 {
    %v = memref.load %x[%i] : memref<1024xf32>
    %b0 = arith.cmpi slt, %i, %window : index
    %j = arith.index_cast %i : index to i32
    %b1 = arith.cmpi slt, %j, %n : i32
    %b2 = arith.cmpi slt, %i, %m : index
    %b3 = arith.cmpi slt, %i, %m : index
    %a = arith.andi %b0, %b1 : i1
    %d = arith.andi %b2, %b3 : i1
    %c = arith.andi %a, %d : i1
    %r = arith.select %c, %v, %zero : f32
    memref.store %r, %out[%i] : memref<1024xf32>
  }
  return
}
"""


def test_comparisons_that_change_value_at_the_same_index_go_with_one_split():
    """A masked load's window (n clamped to the tile) and `tl.where(cols < n)` (i32) change value at one
    index over a loop in [0, 1024]: one split settles both, another the two alike, and no comparison is
    left. Clamped to a constant inside the loop's range, the window is another bound."""
    text = rewritten(MASK_FORMS.replace("CLAMP", "1024"), split_loops_at_bounds)
    assert "arith.cmpi slt, %arg" not in text and text.count("scf.for") == 4
    other = rewritten(MASK_FORMS.replace("CLAMP", "512"), split_loops_at_bounds)
    assert "arith.cmpi slt, %arg" in other


@triton.jit
def masked_select_kernel(x_ptr, out_ptr, n_rows, n_cols, shift, stride, FORM: tl.constexpr,
                         BM: tl.constexpr, BN: tl.constexpr):
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    cols = tl.arange(0, BN)
    inside = (rows[:, None] < n_rows) & (cols[None, :] < BN)
    x = tl.load(x_ptr + rows[:, None] * stride + cols[None, :], mask=inside, other=0.0)
    if FORM == 0:
        y = tl.where(cols[None, :] < n_cols, x * 2.0 + 1.0, -3.0)
    elif FORM == 1:
        y = tl.where(cols[None, :] >= n_cols, x - 1.0, x * x)
    elif FORM == 2:
        y = tl.where(cols[None, :] + shift <= n_cols, x, 0.0)
    else:
        y = tl.where((rows[:, None] < n_cols) & (cols[None, :] < n_cols), x, 7.0)
    tl.store(out_ptr + rows[:, None] * stride + cols[None, :], y, mask=inside)


def expected(x, form, n, shift, row0):
    cols = torch.arange(x.shape[1])[None, :]
    rows = torch.arange(x.shape[0])[:, None] + row0
    if form == 0:
        return torch.where(cols < n, x * 2.0 + 1.0, torch.tensor(-3.0))
    if form == 1:
        return torch.where(cols >= n, x - 1.0, x * x)
    if form == 2:       # in i32, as the kernel adds: a shift near the top wraps
        shifted = cols.to(torch.int32) + torch.tensor(shift, dtype=torch.int32)
        return torch.where(shifted <= n, x, torch.tensor(0.0))
    return torch.where((rows < n) & (cols < n), x, torch.tensor(7.0))


@pytest.mark.parametrize("form", [0, 1, 2, 3])
@pytest.mark.parametrize("n", [-5, 0, 1, 13, 45, 64, 1000])
def test_kernels_selecting_by_masks_match_torch(target, form, n):
    rows, cols, shift = 37, 64, 3
    x = torch.randn(rows, cols)
    out = torch.empty_like(x)
    masked_select_kernel[(triton.cdiv(rows, 8),)](x, out, rows, n, shift, cols, FORM=form, BM=8, BN=cols)
    torch.testing.assert_close(out, expected(x, form, n, shift, 0))


@pytest.mark.parametrize("shift, n", [(2 ** 31 - 20, 2 ** 31 - 1), (2 ** 31 - 20, 5), (-(2 ** 31) + 4, -(2 ** 31) + 30)])
def test_an_offset_that_wraps_takes_the_loop_as_it_was(target, shift, n):
    """cols + shift wraps past the i32 range inside the tile: the guard sees it, and the unsplit loop
    computes what i32 arithmetic gives."""
    rows, cols = 9, 64
    x = torch.randn(rows, cols)
    out = torch.empty_like(x)
    masked_select_kernel[(triton.cdiv(rows, 8),)](x, out, rows, n, shift, cols, FORM=2, BM=8, BN=cols)
    torch.testing.assert_close(out, expected(x, 2, n, shift, 0))


I32_LOOP = """
func.func @k(%x: memref<1024xf32>, %out: memref<1024xf32>, %n: i32) {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %zero = arith.constant 0.0 : f32
  scf.for %i = %c0 to %n step %c1 : i32 {
    %j = arith.index_cast %i : i32 to index
    %v = memref.load %x[%j] : memref<1024xf32>
    %c = arith.cmpi slt, %i, %n : i32
    %r = arith.select %c, %v, %zero : f32
    memref.store %r, %out[%j] : memref<1024xf32>
  }
  return
}
"""


def test_a_loop_over_i32_is_left_alone():
    """A kernel's own loop over i32 values (FlagGems' isin: `range(0, N, BLOCK_N)` with BLOCK_N 1) keeps
    its comparison: the split point would be an index."""
    text = rewritten(I32_LOOP, split_loops_at_bounds)
    assert text.count("scf.for") == 1 and "arith.cmpi slt" in text


@triton.jit
def unit_step_kernel(x_ptr, out_ptr, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.arange(0, BLOCK_M)[:, None]
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for col in range(0, N, BLOCK_N):
        cols = col + tl.arange(0, BLOCK_N)[None, :]
        mask = (rows < M) & (cols < N)
        acc += tl.load(x_ptr + rows * N + cols, mask=mask, other=0.0)
    tl.store(out_ptr + rows, tl.sum(acc, axis=1)[:, None], mask=rows < M)


@pytest.mark.parametrize("n", [1, 7])
def test_a_kernel_loop_with_a_unit_step_over_i32(target, n):
    x = torch.randn(5, n)
    out = torch.empty(5)
    unit_step_kernel[(1,)](x, out, 5, n, BLOCK_M=8, BLOCK_N=1)
    torch.testing.assert_close(out, x.sum(1))
