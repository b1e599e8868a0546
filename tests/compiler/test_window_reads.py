"""Reads of an edge tile's unmasked window go to the argument it was copied from (compiler/window_reads.py),
from bufferized IR as the conversion of a masked load of a read-only argument leaves it; and kernels whose
tiles are read that way compute what torch does, on both targets."""
import pytest
import torch
import triton
import triton.language as tl

from spine.compiler.window_reads import read_windows_in_place
from tests.compiler.ir_rewrites import EDGE_TILE_BRANCH, rewritten as rewritten_by
from tests.to_linalg.test_golden import filecheck

# %w: a 1024-lane tile of %arg, whole tiles read in place, edge tiles (%n < 1024 lanes) copied with
# zero padding; READERS uses it.
EDGE_TILE = """
#map = affine_map<(d0) -> (d0)>
#map1 = affine_map<(d0) -> ()>
func.func @k(%arg: memref<?xf32>, %out: memref<?xf32>, %total: memref<f32>, %n: index, %o: index) {
  %pad_value = arith.constant 0.0 : f32
""" + EDGE_TILE_BRANCH.replace("CONDITION", "%partial") + """
  %dest = memref.reinterpret_cast %out to offset: [%o], sizes: [%n], strides: [1] : memref<?xf32> to memref<?xf32, strided<[1], offset: ?>>
  %window = memref.subview %w[0] [%n] [1] : memref<1024xf32, strided<[1], offset: ?>> to memref<?xf32, strided<[1], offset: ?>>
  linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%window : memref<?xf32, strided<[1], offset: ?>>) outs(%dest : memref<?xf32, strided<[1], offset: ?>>) {
  ^bb0(%in: f32, %unused: f32):
    %twice = arith.addf %in, %in : f32
    linalg.yield %twice : f32
  }
  READERS
  return
}
"""
SUM_OF_TILE = """linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["reduction"]} ins(%w : memref<1024xf32, strided<[1], offset: ?>>) outs(%total : memref<f32>) {
  ^bb0(%in: f32, %acc: f32):
    %s = arith.addf %acc, %in : f32
    linalg.yield %s : f32
  }"""


def rewritten(readers: str) -> str:
    return rewritten_by(EDGE_TILE.replace("READERS", readers), read_windows_in_place)


def test_a_window_of_an_edge_tile_reads_the_argument_and_the_copy_goes():
    text = rewritten("")
    filecheck(text, """
CHECK: func.func @k(%[[ARG:[a-z0-9]+]]: memref<?xf32>, %{{.*}}, %{{.*}}, %[[N:[a-z0-9]+]]: index, %[[O:[a-z0-9]+]]: index)
CHECK: scf.if
CHECK-NOT: linalg.copy
CHECK-NOT: linalg.fill
CHECK: scf.yield
CHECK: %[[IN:.*]] = memref.reinterpret_cast %[[ARG]] to offset: [%[[O]]], sizes: [%[[N]]], strides: [1]
CHECK: linalg.generic {{.*}} ins(%[[IN]] :
""")


def test_a_tile_read_beyond_its_window_keeps_its_copy():
    text = rewritten(SUM_OF_TILE)
    assert "linalg.copy" in text and "linalg.fill" in text      # the sum reads the padding too
    filecheck(text, """
CHECK: } else {
CHECK: memref.reinterpret_cast %arg1
CHECK-NEXT: %[[IN:.*]] = memref.reinterpret_cast %arg0
CHECK-NEXT: linalg.generic {{.*}} ins(%[[IN]] :
""")


@triton.jit
def scaled_rows_kernel(x_ptr, w_ptr, out_ptr, sums_ptr, n_cols, BLOCK: tl.constexpr):
    """out = x * w + w on each row (w's edge tile read only in the stored window), and the sum of w over
    the whole tile (its zero padding included) per row."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    tl.store(out_ptr + row * n_cols + cols, x * w + w, mask=mask)
    v = tl.load(w_ptr + cols, mask=mask, other=0.0)
    tl.store(sums_ptr + row, tl.sum(v * x, axis=0))


@pytest.mark.parametrize("n_cols", [1, 45, 64, 100])
def test_rows_with_edge_tiles_read_in_place(target, n_cols):
    rows = 5
    x, w = torch.randn(rows, n_cols), torch.randn(n_cols)
    out, sums = torch.empty(rows, n_cols), torch.empty(rows)
    scaled_rows_kernel[(rows,)](x, w, out, sums, n_cols, BLOCK=64 if n_cols <= 64 else 128)
    torch.testing.assert_close(out, x * w + w)
    torch.testing.assert_close(sums, (x * w).sum(dim=1), rtol=1e-5, atol=1e-5)
