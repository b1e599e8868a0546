"""Reads of an edge tile go to the argument inside the mask's window and to the fill value outside it
(compiler/edge_tile_reads.py): from bufferized IR as the conversion of a masked load of a read-only
argument leaves it, and kernels whose edge tiles are read that way against torch, on both targets."""
import pytest
import torch
import triton
import triton.language as tl

from spine.compiler.edge_tile_reads import mark_edge_tiles, read_edge_tiles_in_place
from tests.compiler.ir_rewrites import EDGE_TILE_BRANCH, rewritten as rewritten_by
from tests.to_linalg.test_golden import filecheck

# %w: a 1024-lane tile of %arg, whole tiles read in place, edge tiles (%n < 1024 lanes) copied with -inf
# padding; READERS uses it, PARTIAL is the branch's condition.
EDGE_TILE = """
#map = affine_map<(d0) -> (d0)>
#map1 = affine_map<(d0) -> ()>
func.func @k(%arg: memref<?xf32>, %out: memref<1024xf32>, %top: memref<f32>, %n: index, %o: index) {
  %pad_value = arith.constant 0xFF800000 : f32
  %unrelated = arith.cmpi sgt, %n, %o : index
""" + EDGE_TILE_BRANCH.replace("CONDITION", "PARTIAL") + """
  READERS
  return
}
"""
MAX_OF_TILE = """linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["reduction"]} ins(%w : memref<1024xf32, strided<[1], offset: ?>>) outs(%top : memref<f32>) {
  ^bb0(%in: f32, %acc: f32):
    %m = arith.maxnumf %acc, %in : f32
    linalg.yield %m : f32
  }"""
DOUBLED_TILE = """linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%w : memref<1024xf32, strided<[1], offset: ?>>) outs(%out : memref<1024xf32>) {
  ^bb0(%in: f32, %unused: f32):
    %twice = arith.addf %in, %in : f32
    linalg.yield %twice : f32
  }"""
FIRST_ELEMENT = """%first = memref.subview %w[0] [1] [1] : memref<1024xf32, strided<[1], offset: ?>> to memref<f32, strided<[], offset: ?>>
  %v = memref.load %first[] : memref<f32, strided<[], offset: ?>>
  memref.store %v, %top[] : memref<f32>"""


def rewritten(readers: str, partial: str = "%partial") -> str:
    def rewrite(module):
        from mlir import passmanager
        mark_edge_tiles(module)
        passmanager.PassManager.parse("builtin.module(convert-linalg-to-loops)").run(module.operation)
        read_edge_tiles_in_place(module)
    return rewritten_by(EDGE_TILE.replace("READERS", readers).replace("PARTIAL", partial), rewrite)


def test_reads_of_an_edge_tile_go_to_the_argument_or_the_fill_and_the_copy_goes():
    text = rewritten("\n".join([MAX_OF_TILE, DOUBLED_TILE, FIRST_ELEMENT]))
    assert "memref.alloca" not in text and "spine.edge_tile" not in text
    filecheck(text, """
CHECK: func.func @k(%[[ARG:[a-z0-9]+]]: memref<?xf32>, %{{.*}}, %{{.*}}, %[[N:[a-z0-9]+]]: index, %[[O:[a-z0-9]+]]: index)
CHECK: %[[PAD:.*]] = arith.constant 0xFF800000 : f32
CHECK-NOT: scf.if
CHECK: %[[WHOLE:.*]] = memref.reinterpret_cast %[[ARG]] to offset: [%[[O]]], sizes: [1024], strides: [1]
CHECK: scf.for %[[I:.*]] = %{{.*}} to %{{.*}} step
CHECK-NEXT: %[[IN:.*]] = arith.cmpi slt, %[[I]], %[[N]] : index
CHECK-NEXT: %[[X:.*]] = scf.if %[[IN]] -> (f32) {
CHECK-NEXT: %[[V:.*]] = memref.load %[[WHOLE]][%[[I]]]
CHECK-NEXT: scf.yield %[[V]]
CHECK-NEXT: } else {
CHECK-NEXT: scf.yield %[[PAD]]
CHECK: arith.maxnumf %{{.*}}, %[[X]]
CHECK: scf.for %[[J:.*]] = %{{.*}} to %{{.*}} step
CHECK-NEXT: arith.cmpi slt, %[[J]], %[[N]] : index
CHECK: memref.load %[[WHOLE]][%[[J]]]
CHECK: arith.addf
CHECK: arith.cmpi slt, %{{.*}}, %[[N]] : index
CHECK: memref.load %[[WHOLE]]
CHECK: memref.store %{{.*}}, %arg2[]
""")


def test_a_branch_on_another_condition_keeps_its_copy():
    """The else branch is the whole tile only when the condition says the window is."""
    text = rewritten(MAX_OF_TILE, partial="%unrelated")
    assert "memref.alloca" in text and "spine.edge_tile" not in text
    assert "arith.cmpi slt" not in text


def test_a_tile_written_after_its_branch_keeps_its_copy():
    written = MAX_OF_TILE + """
  %c0 = arith.constant 0 : index
  memref.store %pad_value, %w[%c0] : memref<1024xf32, strided<[1], offset: ?>>"""
    text = rewritten(written)
    assert "memref.alloca" in text and "arith.cmpi slt" not in text


@triton.jit
def padded_rows_kernel(x_ptr, out_ptr, stats_ptr, n_cols, BLOCK: tl.constexpr):
    """Per row: softmax, and the row's max, min (over its -inf / +inf padding) and sum (zero padding)."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=-float("inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + row * n_cols + cols, e / tl.sum(e, axis=0), mask=mask)
    low = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=float("inf"))
    zero = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
    tl.store(stats_ptr + row * 3, tl.max(x, axis=0))
    tl.store(stats_ptr + row * 3 + 1, tl.min(low, axis=0))
    tl.store(stats_ptr + row * 3 + 2, tl.sum(zero * 2.0, axis=0))


@pytest.mark.parametrize("n_cols", [1, 45, 64, 100])
def test_padded_rows_read_in_place(target, n_cols):
    rows = 6
    x = torch.randn(rows, n_cols)
    out, stats = torch.empty(rows, n_cols), torch.empty(rows, 3)
    padded_rows_kernel[(rows,)](x, out, stats, n_cols, BLOCK=64 if n_cols <= 64 else 128)
    torch.testing.assert_close(out, torch.softmax(x, dim=1))
    torch.testing.assert_close(stats[:, 0], x.amax(dim=1))
    torch.testing.assert_close(stats[:, 1], x.amin(dim=1))
    torch.testing.assert_close(stats[:, 2], 2 * x.sum(dim=1), rtol=1e-5, atol=1e-5)


def test_a_softmax_in_place_reads_its_row_before_writing_it(target):
    """out is the input: the launcher's overlap check takes the build that copies."""
    from tests.kernels import softmax_kernel
    x = torch.randn(7, 100)
    expected = torch.softmax(x, dim=1)
    softmax_kernel[(7,)](x, x, x.stride(0), x.stride(0), 100, BLOCK=128)
    torch.testing.assert_close(x, expected)


@triton.jit
def padded_block_kernel(x_ptr, rows_ptr, cols_ptr, m, n, BM: tl.constexpr, BN: tl.constexpr):
    """A 2-D tile masked in both dimensions: its max along each axis."""
    r = tl.arange(0, BM)[:, None]
    c = tl.arange(0, BN)[None, :]
    x = tl.load(x_ptr + r * n + c, mask=(r < m) & (c < n), other=-float("inf"))
    tl.store(rows_ptr + tl.arange(0, BM), tl.max(x, axis=1), mask=tl.arange(0, BM) < m)
    tl.store(cols_ptr + tl.arange(0, BN), tl.max(x, axis=0), mask=tl.arange(0, BN) < n)


@pytest.mark.parametrize("m, n", [(3, 5), (16, 30), (9, 32)])
def test_a_tile_masked_in_two_dimensions(target, m, n):
    x = torch.randn(m, n)
    rows, cols = torch.empty(m), torch.empty(n)
    padded_block_kernel[(1,)](x, rows, cols, m, n, BM=16, BN=32)
    torch.testing.assert_close(rows, x.amax(dim=1))
    torch.testing.assert_close(cols, x.amax(dim=0))


def test_a_softmax_row_is_not_copied_into_a_tile(monkeypatch):
    """The row is read in place below n_cols: the one 128-lane buffer left holds exp's results."""
    from spine.compiler.lower import LoweringChoices, lower
    from spine.driver import CPUDriver
    from tests.kernels import softmax_kernel
    triton.runtime.driver.set_active(CPUDriver(target="host"))
    x, out = torch.randn(3, 100), torch.empty(3, 100)
    compiled = softmax_kernel[(3,)](out, x, 100, 100, 100, BLOCK=128)
    md = compiled.metadata
    lowered = lower(compiled.asm["linalg"], LoweringChoices.for_target(md.triple, False, md.cpu, md.features))
    assert lowered.count("alloca float, i64 128") == 1   # the MLIR passes' LLVM IR, before LLVM's own
    torch.testing.assert_close(out, torch.softmax(x, dim=1))
