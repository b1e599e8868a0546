"""A loop that reads what the loop before it wrote, element by element, joins it
(compiler/loop_fusion.py): from IR text as the loops leave it, and kernels whose reductions read
materialised tiles against torch, on both targets."""
import pytest
import torch
import triton
import triton.language as tl

from spine.compiler.loop_fusion import fuse_adjacent_loops
from tests.compiler.ir_rewrites import rewritten
from tests.to_linalg.test_golden import filecheck

# exp of %x into a tile, then the tile's sum: SECOND_READ is how the second loop reads the tile, BETWEEN
# what lies between the loops.
TWO_LOOPS = """
func.func @k(%x: memref<1000xf32>, %out: memref<1000xf32>, %total: memref<f32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c999 = arith.constant 999 : index
  %c1000 = arith.constant 1000 : index
  %zero = arith.constant 0.0 : f32
  %tile = memref.alloca() : memref<1000xf32>
  %acc = memref.alloca() : memref<f32>
  scf.for %i = %c0 to %c1000 step %c1 {
    %v = memref.load %x[%i] : memref<1000xf32>
    %e = math.exp %v : f32
    memref.store %e, %tile[%i] : memref<1000xf32>
  }
  BETWEEN
  scf.for %j = %c0 to %c1000 step %c1 {
    SECOND_READ
    %a = memref.load %acc[] : memref<f32>
    %s = arith.addf %a, %t : f32
    memref.store %s, %acc[] : memref<f32>
  }
  return
}
"""
AT_INDEX = "%t = memref.load %tile[%j] : memref<1000xf32>"
INIT = "memref.store %zero, %acc[] : memref<f32>"


def fused(second_read: str = AT_INDEX, between: str = INIT) -> str:
    return rewritten(TWO_LOOPS.replace("SECOND_READ", second_read).replace("BETWEEN", between),
                     fuse_adjacent_loops)


def test_a_sum_of_the_tile_the_loop_before_wrote_joins_it():
    filecheck(fused(), """
CHECK: memref.store %{{.*}}, %[[ACC:.*]][] : memref<f32>
CHECK: scf.for
CHECK: %[[E:.*]] = math.exp
CHECK-NEXT: memref.store %[[E]], %[[TILE:.*]][%{{.*}}]
CHECK-NEXT: %[[A:.*]] = memref.load %[[ACC]][]
CHECK-NEXT: %[[S:.*]] = arith.addf %[[A]], %[[E]]
CHECK-NEXT: memref.store %[[S]], %[[ACC]][]
CHECK-NEXT: }
CHECK-NEXT: return
""")


def test_a_read_of_another_element_keeps_the_loops_apart():
    """Element i + 1 is written only in the next iteration of the first loop."""
    text = fused(second_read="%n = arith.addi %j, %c1 : index\n    %m = arith.minsi %n, %c999 : index\n"
                             "    %t = memref.load %tile[%m] : memref<1000xf32>")
    assert text.count("scf.for") == 2


def test_a_read_through_a_view_that_starts_further_on_keeps_the_loops_apart():
    """Element j of the view is element j + 1 of the tile: written in the next iteration of the first."""
    view = ("%rest = memref.subview %tile[1] [999] [1] : memref<1000xf32> to memref<999xf32, strided<[1], offset: 1>>\n"
            "  ")
    text = fused(second_read="%m = arith.minsi %j, %c999 : index\n"
                             "    %c998 = arith.constant 998 : index\n"
                             "    %k = arith.minsi %m, %c998 : index\n"
                             "    %t = memref.load %rest[%k] : memref<999xf32, strided<[1], offset: 1>>",
                 between=INIT + "\n  " + view)
    assert text.count("scf.for") == 2


def test_an_argument_written_first_and_read_second_keeps_the_loops_apart():
    """The kernel's arguments may overlap: %x could be %out."""
    text = fused(second_read="%t = memref.load %x[%j] : memref<1000xf32>",
                 between="memref.store %zero, %out[%c0] : memref<1000xf32>")
    assert text.count("scf.for") == 2
    source = TWO_LOOPS.replace("memref.store %e, %tile[%i]", "memref.store %e, %out[%i]")
    text = rewritten(source.replace("SECOND_READ", "%t = memref.load %x[%j] : memref<1000xf32>")
                     .replace("BETWEEN", INIT), fuse_adjacent_loops)
    assert text.count("scf.for") == 2


def test_an_operation_between_that_reads_the_tile_goes_after_the_joined_loop():
    """It reads what the first loop wrote, so it cannot go before it; the second loop neither needs it nor
    writes what it reads, so it can wait until after both."""
    filecheck(fused(between=INIT + "\n  %first = memref.load %tile[%c0] : memref<1000xf32>\n"
                    "  memref.store %first, %total[] : memref<f32>"), """
CHECK: scf.for
CHECK: math.exp
CHECK: arith.addf
CHECK: }
CHECK-NEXT: %[[FIRST:.*]] = memref.load %{{.*}}[%{{.*}}] : memref<1000xf32>
CHECK-NEXT: memref.store %[[FIRST]], %{{.*}}[] : memref<f32>
CHECK-NEXT: return
""")


def test_an_operation_between_that_writes_what_the_second_reads_keeps_the_loops_apart():
    text = fused(between=INIT + "\n  memref.store %zero, %tile[%c0] : memref<1000xf32>")
    assert text.count("scf.for") == 2


def test_a_second_loop_that_needs_the_first_loops_sum_keeps_the_loops_apart():
    """The scale is the first loop's sum: it cannot be read before that loop ends."""
    scaled = ("%t0 = memref.load %tile[%j] : memref<1000xf32>\n"
              "    %t = arith.mulf %t0, %scale : f32")
    between = INIT + "\n  %scale = memref.load %total[] : memref<f32>"
    source = TWO_LOOPS.replace("memref.store %e, %tile[%i] : memref<1000xf32>",
                               "memref.store %e, %tile[%i] : memref<1000xf32>\n"
                               "    memref.store %e, %total[] : memref<f32>")
    text = rewritten(source.replace("SECOND_READ", scaled).replace("BETWEEN", between), fuse_adjacent_loops)
    assert text.count("scf.for") == 2


def test_reads_of_arguments_between_pass_a_loop_that_only_reads_them():
    """The loads of %total and %x[0] go before the first loop, which writes no argument."""
    filecheck(fused(between=INIT + "\n  %m = memref.load %total[] : memref<f32>\n"
                    "  %x0 = memref.load %x[%c0] : memref<1000xf32>\n"
                    "  %mx = arith.addf %m, %x0 : f32\n"
                    "  memref.store %mx, %acc[] : memref<f32>"), """
CHECK: memref.load %{{.*}}[] : memref<f32>
CHECK-NEXT: memref.load %{{.*}}[%{{.*}}] : memref<1000xf32>
CHECK: scf.for
CHECK: math.exp
CHECK: arith.addf
CHECK: }
CHECK-NEXT: return
""")


def test_a_loop_over_other_bounds_between_moves_after_the_joined_loop():
    """An independent loop over the first 10 elements writing %out: the sum joins the loop before it."""
    other = ("%c10 = arith.constant 10 : index\n"
             "  scf.for %k = %c0 to %c10 step %c1 {\n"
             "    %v = memref.load %tile[%k] : memref<1000xf32>\n"
             "    memref.store %v, %out[%k] : memref<1000xf32>\n"
             "  }")
    text = fused(between=INIT + "\n  " + other)
    assert text.count("scf.for") == 2
    filecheck(text, """
CHECK: scf.for %{{.*}} = %{{.*}} to %c1000
CHECK: math.exp
CHECK: arith.addf
CHECK: }
CHECK-NEXT: scf.for %{{.*}} = %{{.*}} to %c10
""")


def test_a_loop_between_that_writes_what_the_second_reads_keeps_the_loops_apart():
    other = ("%c10 = arith.constant 10 : index\n"
             "  scf.for %k = %c0 to %c10 step %c1 {\n"
             "    memref.store %zero, %tile[%k] : memref<1000xf32>\n"
             "  }")
    assert fused(between=INIT + "\n  " + other).count("scf.for") == 3


@triton.jit
def normalised_rows_kernel(x_ptr, out_ptr, stats_ptr, n_cols, BLOCK: tl.constexpr):
    """Layer norm without weights, and each row's sum of squares of its softmax."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
    centred = tl.where(mask, x - tl.sum(x, axis=0) / n_cols, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(centred * centred, axis=0) / n_cols + 1e-5)
    tl.store(out_ptr + row * n_cols + cols, centred * rstd, mask=mask)
    e = tl.exp(tl.where(mask, x, -float("inf")) - tl.max(tl.where(mask, x, -float("inf")), axis=0))
    p = e / tl.sum(e, axis=0)
    tl.store(stats_ptr + row, tl.sum(p * p, axis=0))


@pytest.mark.parametrize("n_cols", [1, 45, 128, 300])
def test_rows_whose_reductions_read_computed_tiles(target, n_cols):
    rows = 5
    x = torch.randn(rows, n_cols)
    out, stats = torch.empty(rows, n_cols), torch.empty(rows)
    normalised_rows_kernel[(rows,)](x, out, stats, n_cols, BLOCK=triton.next_power_of_2(n_cols))
    torch.testing.assert_close(out, torch.nn.functional.layer_norm(x, (n_cols,), eps=1e-5), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(stats, (torch.softmax(x, dim=1) ** 2).sum(dim=1))
