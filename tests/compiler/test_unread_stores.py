"""Stores into local buffers that nothing reads, dropped (compiler/unread_stores.py): which stores go and
which stay, from loop IR text; and a row kernel whose masked tiles leave such stores computes what torch
does, on both targets, for rows shorter than its tile and as long."""
import re

import pytest
import torch
import triton
import triton.language as tl

from spine.compiler.unread_stores import drop_unread_stores
from tests.compiler.ir_rewrites import rewritten
from tests.to_linalg.test_golden import filecheck

# A masked tile as split-loops-at-bounds leaves it: lanes below the bound from %x, zeros above, both summed;
# then READ_LOOP reads the tile (its lanes below %bound by default) and writes %out.
ROW = """
func.func private @use(memref<64xf32>)
func.func @k(%x: memref<?xf32>, %out: memref<?xf32>, %sum: memref<f32>, %n: index, %flag: i1) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %zero = arith.constant 0.0 : f32
  %tile = memref.alloca() : memref<64xf32>
  %other = memref.alloca() : memref<64xf32>
  %acc = memref.alloca() : memref<f32>
  memref.store %zero, %acc[] : memref<f32>
  %lo = arith.maxsi %n, %c0 : index
  %bound = arith.minsi %lo, %c64 : index
  %low = arith.minsi %bound, %c64 : index
  %at = arith.maxsi %low, %c0 : index
  scf.for %i = %c0 to %at step %c1 {
    %v = memref.load %x[%i] : memref<?xf32>
    memref.store %v, %tile[%i] : memref<64xf32>
    %t = memref.load %tile[%i] : memref<64xf32>
    %s = memref.load %acc[] : memref<f32>
    %s2 = arith.addf %s, %t : f32
    memref.store %s2, %acc[] : memref<f32>
  }
  scf.for %i = %at to %c64 step %c1 {
    memref.store %zero, %tile[%i] : memref<64xf32>
    %t = memref.load %tile[%i] : memref<64xf32>
    %s = memref.load %acc[] : memref<f32>
    %s2 = arith.addf %s, %t : f32
    memref.store %s2, %acc[] : memref<f32>
  }
  %total = memref.load %acc[] : memref<f32>
  READ_LOOP
  memref.store %total, %sum[] : memref<f32>
  return
}
"""

BELOW_BOUND = """scf.for %i = %c0 to %bound step %c1 {
    %t = memref.load %tile[%i] : memref<64xf32>
    %r = arith.subf %t, %total : f32
    memref.store %r, %out[%i] : memref<?xf32>
  }"""


def drop(read_loop: str = BELOW_BOUND) -> str:
    return rewritten(ROW.replace("READ_LOOP", read_loop), drop_unread_stores)


def test_zeros_past_the_bound_that_only_lanes_below_it_read_are_dropped():
    """The tail loop's zeros go; the sum still adds what was stored (forwarded: no load of the tile is
    left in either loop); the lanes below the bound stay stored for the loop that reads them."""
    text = drop()
    filecheck(text, """
    CHECK: scf.for %[[I:.*]] = %c0 to %[[AT:.*]] step %c1
    CHECK:   %[[V:.*]] = memref.load %arg0[%[[I]]]
    CHECK:   memref.store %[[V]], %alloca[%[[I]]]
    CHECK-NOT: memref.load %alloca[
    CHECK:   arith.addf %{{.*}}, %[[V]]
    CHECK: scf.for %{{.*}} = %[[AT]] to %c64 step %c1
    CHECK-NOT: memref.store %cst, %alloca[
    CHECK:   arith.addf %{{.*}}, %cst
    CHECK: scf.for %[[J:.*]] = %c0 to %{{.*}} step %c1
    CHECK:   memref.load %alloca[%[[J]]]
    """)
    assert text.count("memref.store %cst, %alloca[") == 0


@pytest.mark.parametrize("read_loop", [
    # the whole tile is read
    BELOW_BOUND.replace("to %bound", "to %c64"),
    # the read loop runs in another loop: its bounds could differ from one run to the next
    "scf.for %j = %c0 to %c1 step %c1 {\n" + BELOW_BOUND + "\n  }",
    # the tile leaves the function's sight
    "func.call @use(%tile) : (memref<64xf32>) -> ()",
    # through a select of two buffers, all lanes of either
    BELOW_BOUND.replace("to %bound", "to %c64").replace("%t = memref.load %tile[%i]",
                                                        "%e = arith.select %flag, %tile, %other : memref<64xf32>\n"
                                                        "    %t = memref.load %e[%i]"),
    # a constant lane past the bound
    "%c60 = arith.constant 60 : index\n  %t = memref.load %tile[%c60] : memref<64xf32>\n"
    "  memref.store %t, %out[%c0] : memref<?xf32>",
])
def test_stores_that_a_load_may_read_stay(read_loop):
    assert "memref.store %cst, %alloca[" in drop(read_loop)


def test_a_tail_that_only_updates_itself_is_dropped():
    """A later loop over the tail adds each lane to itself and stores it back: no needed load reads those
    lanes, so neither its stores nor the zeros before them are kept."""
    text = drop(BELOW_BOUND + """
  scf.for %i = %at to %c64 step %c1 {
    %t = memref.load %tile[%i] : memref<64xf32>
    %u = arith.addf %t, %t : f32
    memref.store %u, %tile[%i] : memref<64xf32>
  }""")
    assert "memref.store %cst, %alloca[" not in text
    # the sum's zero and its two updates, the lanes below the bound, %out, %sum
    assert text.count("memref.store") == 6


FORWARD = """
func.func @k(%x: memref<?xf32>, %out: memref<?xf32>, %w: f32) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %tile = memref.alloca() : memref<64xf32>
  scf.for %i = %c0 to %c64 step %c1 {
    %v = memref.load %x[%i] : memref<?xf32>
    memref.store %v, %tile[%i] : memref<64xf32>
    BETWEEN
    %t = memref.load %tile[%i] : memref<64xf32>
    memref.store %t, %out[%i] : memref<?xf32>
  }
  scf.for %i = %c0 to %c64 step %c1 {
    %t = memref.load %tile[%i] : memref<64xf32>
    memref.store %t, %out[%i] : memref<?xf32>
  }
  return
}
"""


@pytest.mark.parametrize("between, forwarded", [
    ("", True),
    ("memref.store %w, %out[%c0] : memref<?xf32>", True),        # an argument is not the local tile
    ("%sv = memref.subview %tile[0] [32] [1] : memref<64xf32> to memref<32xf32, strided<[1]>>\n"
     "    memref.store %w, %sv[%c0] : memref<32xf32, strided<[1]>>", False),
    ("memref.store %w, %tile[%c0] : memref<64xf32>", False),
    ("%sv = memref.subview %tile[0] [32] [1] : memref<64xf32> to memref<32xf32, strided<[1]>>\n"
     "    memref.copy %sv, %sv : memref<32xf32, strided<[1]>> to memref<32xf32, strided<[1]>>", False),
])
def test_a_load_takes_the_value_its_iteration_stored_unless_something_may_write_between(between, forwarded):
    text = rewritten(FORWARD.replace("BETWEEN", between), drop_unread_stores)
    first = text.split("scf.for")[1]
    assert ("memref.load %alloca" not in first) == forwarded
    # the store itself stays: the second loop reads every lane
    assert re.search(r"(%\w+) = memref.load %arg0\[(%\w+)\][^\n]*\n\s*memref.store \1, %alloca\[\2\]", first)


@triton.jit
def row_backward_kernel(X, DY, W, DX, PARTIAL, N, BLOCK: tl.constexpr):
    """Tutorial 05's backward in miniature: sums over masked tiles, a masked store, a partial sum updated
    in place. Its tiles' lanes past N are zeros nothing reads."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(X + row * N + cols, mask=mask, other=0.0)
    dy = tl.load(DY + row * N + cols, mask=mask, other=0.0)
    w = tl.load(W + cols, mask=mask, other=0.0)
    xw = tl.where(mask, x * w, 0.0)
    wdy = tl.where(mask, w * dy, 0.0)
    c1 = tl.sum(xw * wdy, axis=0) / N
    c2 = tl.sum(wdy, axis=0) / N
    tl.store(DX + row * N + cols, wdy - (xw * c1 + c2), mask=mask)
    partial = dy * xw + tl.load(PARTIAL + row * N + cols, mask=mask, other=0.0)
    tl.store(PARTIAL + row * N + cols, partial, mask=mask)


@pytest.mark.parametrize("n", [1, 13, 100, 128])
def test_a_row_kernel_with_unread_tails_matches_torch(target, n):
    rows = 5
    x, dy, w, start = torch.randn(rows, n), torch.randn(rows, n), torch.randn(n), torch.randn(rows, n)
    dx, partial = torch.empty(rows, n), start.clone()
    row_backward_kernel[(rows,)](x, dy, w, dx, partial, n, BLOCK=128)
    xw, wdy = x * w, w * dy
    c1 = (xw * wdy).sum(1, keepdim=True) / n
    c2 = wdy.sum(1, keepdim=True) / n
    torch.testing.assert_close(dx, wdy - (xw * c1 + c2), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(partial, dy * xw + start, rtol=1e-5, atol=1e-5)
