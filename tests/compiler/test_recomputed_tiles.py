"""Tiles recomputed where they are read (compiler/recomputed_tiles.py, the pass "recompute-tiles"): which
tiles go and which stay, from loop IR text; and a row kernel that keeps such tiles computes what torch does
on both targets, with fewer tiles than before the pass."""
import pytest
import torch
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from spine.compiler.recomputed_tiles import recompute_tiles
from tests.compiler.ir_rewrites import rewritten
from tests.to_linalg.test_golden import filecheck

# A tile computed from two read-only arguments (%x, %w) in a loop that also sums it, then read after the
# sum (READ). BEFORE goes before the computing loop, VALUE computes %h from %d and %i.
TILE = """
func.func @k(%x: memref<?xf32>, %w: memref<?xf32>, %out: memref<?xf32>, %sum: memref<f32>, %n: index,
             %m: f32, %flag: i1) attributes {spine.disjoint_arguments = array<i64: 0, 1>} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %zero = arith.constant 0.0 : f32
  %tile = memref.alloca() : memref<64xf32>
  %acc = memref.alloca() : memref<f32>
  %other = memref.alloca() : memref<64xf32>
  memref.store %zero, %acc[] : memref<f32>
  BEFORE
  scf.for %i = %c0 to %n step %c1 {
    %v = memref.load %x[%i] : memref<?xf32>
    %d = arith.subf %v, %m : f32
    VALUE
    memref.store %h, %tile[%i] : memref<64xf32>
    %s = memref.load %acc[] : memref<f32>
    %s2 = arith.addf %s, %h : f32
    memref.store %s2, %acc[] : memref<f32>
  }
  %total = memref.load %acc[] : memref<f32>
  READ
  memref.store %total, %sum[] : memref<f32>
  return
}
"""

PRODUCT = "%wv = memref.load %w[%i] : memref<?xf32>\n    %h = arith.mulf %d, %wv : f32"
READ = """scf.for %j = %c0 to %n step %c1 {
    %t = memref.load %tile[%j] : memref<64xf32>
    %r = arith.mulf %t, %total : f32
    memref.store %r, %out[%j] : memref<?xf32>
  }"""


def source(value: str = PRODUCT, read: str = READ, before: str = "", attributes: bool = True,
           lanes: int = 16384) -> str:
    """The function, its tiles `lanes` wide (64 KiB each by default: more than a small L1 together)."""
    text = TILE.replace("VALUE", value).replace("READ", read).replace("BEFORE", before)
    if not attributes:
        text = text.replace("attributes {spine.disjoint_arguments = array<i64: 0, 1>}", "")
    return text.replace("64xf32", f"{lanes}xf32").replace("[0] [64] [1]", f"[0] [{lanes}] [1]")


def recompute(**changes) -> tuple:
    """(the function after the pass, what the pass said)."""
    notes = []
    return rewritten(source(**changes), lambda module: notes.append(recompute_tiles(module))), notes[0]


def stores_kept(**changes) -> bool:
    """Whether the pass left every store of the function (the tile's among them)."""
    text, _ = recompute(**changes)
    return text.count("memref.store") == source(**changes).count("memref.store")


def test_a_tile_read_after_its_loop_is_computed_again_there():
    text, note = recompute()
    assert note is None
    filecheck(text, """
    CHECK: scf.for %[[I:.*]] = %c0 to %arg4
    CHECK-NOT: memref.store %{{.*}}, %alloca[
    CHECK: scf.for %[[J:.*]] = %c0 to %arg4
    CHECK:   %[[X:.*]] = memref.load %arg0[%[[J]]]
    CHECK:   %[[D:.*]] = arith.subf %[[X]], %arg5
    CHECK:   %[[W:.*]] = memref.load %arg1[%[[J]]]
    CHECK:   %[[H:.*]] = arith.mulf %[[D]], %[[W]]
    CHECK:   arith.mulf %[[H]], %{{.*}}
    CHECK-NOT: memref.load %alloca[
    """)


def test_tiles_that_fit_a_small_l1_together_are_read_back():
    """Two 64-lane tiles: reading them back costs no more than computing them again."""
    assert recompute(lanes=64)[1] is None
    assert stores_kept(lanes=64)


def test_a_tile_of_a_value_from_before_its_loop_is_read_as_that_value():
    """A scalar broadcast into the tile lane by lane: each read takes the scalar itself, nothing is cloned."""
    text, note = recompute(before="%h = arith.mulf %m, %m : f32", value="")
    assert note is None
    filecheck(text, """
    CHECK: %[[H:[a-z0-9_]+]] = arith.mulf %arg5, %arg5 : f32
    CHECK: memref.load %alloca_0[] : memref<f32>
    CHECK: scf.for
    CHECK-NOT: memref.load %alloca[
    CHECK:   arith.mulf %[[H]], %{{.*}}
    """)


def test_a_read_through_a_view_of_one_lane_keeps_the_tile():
    read = ("%one = memref.subview %tile[0] [1] [1] : memref<16384xf32> to memref<f32, strided<[]>>\n"
            "  %t = memref.load %one[] : memref<f32, strided<[]>>\n  memref.store %t, %out[%c0] : memref<?xf32>")
    assert recompute(read=read)[1] == ("gave up on 1 of 1 tiles computed from read-only memory "
                                       "(first: a read through a view of one lane)")
    assert stores_kept(read=read)


def test_a_masked_load_is_computed_again_at_the_readers_lane():
    """The scf.if around a masked load is cloned with its condition and its load at the read's index."""
    masked = ("%in = arith.cmpi ult, %i, %n : index\n"
              "    %wv = scf.if %in -> (f32) {\n"
              "      %l = memref.load %w[%i] : memref<?xf32>\n"
              "      scf.yield %l : f32\n"
              "    } else {\n"
              "      scf.yield %zero : f32\n"
              "    }\n"
              "    %h = arith.mulf %d, %wv : f32")
    text, note = recompute(value=masked)
    assert note is None
    filecheck(text, """
    CHECK: scf.for %[[J:.*]] = %c0 to %arg4
    CHECK:   %[[IN:.*]] = arith.cmpi ult, %[[J]], %arg4
    CHECK:   scf.if %[[IN]] -> (f32)
    CHECK:     memref.load %arg1[%[[J]]]
    CHECK-NOT: memref.load %alloca[
    """)


SELECTED = READ.replace("%t = memref.load %tile[%j] : memref<64xf32>",
                        "%e = arith.select %flag, %other, %tile : memref<64xf32>\n"
                        "    %v = memref.subview %e[0] [64] [1] : memref<64xf32> to memref<64xf32, strided<[1]>>\n"
                        "    %t = memref.load %v[%j] : memref<64xf32, strided<[1]>>")


def test_a_read_through_a_select_of_the_tile_and_another_buffer_selects_the_recomputed_value():
    """tutorial 05's partial dw: the tile itself in one branch, the tile plus the stored sums in another,
    read after both: the read of the other buffer stays, through the same views."""
    text, note = recompute(read=SELECTED)
    assert note is None
    filecheck(text, """
    CHECK: memref.load %alloca_0[] : memref<f32>
    CHECK: scf.for %[[J:[a-z0-9_]+]] = %c0 to %arg4
    CHECK:   %[[D:[a-z0-9_]+]] = arith.subf %{{.*}}, %arg5
    CHECK:   %[[H:[a-z0-9_]+]] = arith.mulf %[[D]], %{{.*}}
    CHECK:   %[[V:[a-z0-9_]+]] = memref.subview %alloca_1[0] [16384] [1]
    CHECK:   %[[O:[a-z0-9_]+]] = memref.load %[[V]][%[[J]]]
    CHECK:   %[[T:[a-z0-9_]+]] = arith.select %arg6, %[[O]], %[[H]] : f32
    CHECK:   arith.mulf %[[T]], %{{.*}}
    CHECK-NOT: memref.load %alloca[
    """)


@pytest.mark.parametrize("changes", [
    {"attributes": False},                                                 # the arguments may overlap outputs
    {"read": READ + "\n  memref.store %total, %w[%c0] : memref<?xf32>"},  # the kernel writes %w
    {"value": "%h = arith.divf %d, %m : f32"},                            # a division is not cheap
    {"value": "%a = memref.load %acc[] : memref<f32>\n    %h = arith.mulf %d, %a : f32"},   # a local buffer
    {"read": READ + "\n  memref.store %total, %tile[%c0] : memref<64xf32>"},  # a second store
    {"read": READ + "\n  %e = arith.select %flag, %tile, %other : memref<64xf32>\n"   # one through a select
             "  memref.store %total, %e[%c0] : memref<64xf32>"},
])
def test_tiles_that_are_not_computed_from_read_only_memory_alone_stay_silently(changes):
    assert recompute(**changes)[1] is None
    assert stores_kept(**changes)


@pytest.mark.parametrize("changes, why", [
    ({"read": READ.replace("%t = memref.load %tile[%j]",
                           "%a = memref.subview %tile[0] [32] [1] : memref<16384xf32> to memref<32xf32, strided<[1]>>\n"
                           "    %b = memref.subview %other[0] [32] [1] : memref<64xf32> to memref<32xf32, strided<[1]>>\n"
                           "    %e = arith.select %flag, %a, %b : memref<32xf32, strided<[1]>>\n"
                           "    %t = memref.load %e[%j]").replace("memref<64xf32>\n    %r", "memref<32xf32, strided<[1]>>\n    %r")},
     "a read through views of a buffer's select"),
    ({"read": READ.replace("to %n", "to %c64")}, "a read of lanes the store may not write"),
    ({"read": "scf.for %k = %c0 to %c1 step %c1 {\n" + READ + "\n  }"}, "a read in a loop nested in another"),
    ({"before": READ.replace("%total", "%m")}, "a read not after the loop that stores the tile"),
    ({"read": "\n  ".join([READ] * 3)}, "a tile read 3 times"),
    ({"read": "%t = memref.load %tile[%c0] : memref<64xf32>\n  memref.store %t, %out[%c0] : memref<?xf32>"},
     "a read not at a loop's induction variable"),
])
def test_a_tile_one_of_whose_reads_cannot_recompute_it_stays_and_the_pass_says_why(changes, why):
    assert recompute(**changes)[1] == f"gave up on 1 of 1 tiles computed from read-only memory (first: {why})"
    assert stores_kept(**changes)


@triton.jit
def norm_backward_kernel(X, DY, W, DX, Mean, Rstd, N, BLOCK: tl.constexpr):
    """Tutorial 05's dx in miniature: xhat and w * dy are summed over the masked row, then read again."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(X + row * N + cols, mask=mask, other=0.0)
    dy = tl.load(DY + row * N + cols, mask=mask, other=0.0)
    w = tl.load(W + cols, mask=mask, other=0.0)
    mean = tl.load(Mean + row)
    rstd = tl.load(Rstd + row)
    xhat = tl.where(mask, (x - mean) * rstd, 0.0)
    wdy = tl.where(mask, w * dy, 0.0)
    c1 = tl.sum(xhat * wdy, axis=0) / N
    c2 = tl.sum(wdy, axis=0) / N
    tl.store(DX + row * N + cols, (wdy - (xhat * c1 + c2)) * rstd, mask=mask)


@pytest.mark.parametrize("n", [1, 100, 5000, 8192])
def test_a_norm_backward_with_recomputed_tiles_matches_torch(target, n):
    """8192-lane tiles (32 KiB each), which the pass recomputes, on rows shorter than them and as long."""
    rows = 3
    x, dy, w = torch.randn(rows, n), torch.randn(rows, n), torch.randn(n)
    mean, rstd = x.mean(1), torch.rand(rows) + 0.5
    dx = torch.empty(rows, n)
    norm_backward_kernel[(rows,)](x, dy, w, dx, mean, rstd, n, BLOCK=8192)
    xhat, wdy = (x - mean[:, None]) * rstd[:, None], w * dy
    c1 = (xhat * wdy).sum(1, keepdim=True) / n
    c2 = wdy.sum(1, keepdim=True) / n
    torch.testing.assert_close(dx, (wdy - (xhat * c1 + c2)) * rstd[:, None], rtol=1e-5, atol=1e-5)


def _tile_stores(text: str, block: int) -> int:
    """Stores into the function's `block`-lane f32 buffers."""
    import re
    tiles = re.findall(rf"(%\w+) = memref.alloca\(\) \{{alignment = 64 : i64\}} : memref<{block}xf32>", text)
    return sum(len(re.findall(rf"memref.store %\w+, {tile}\[", text)) for tile in tiles)


@pytest.mark.parametrize("block, recomputed", [(8192, True), (128, False)])
def test_the_norm_backward_keeps_its_tiles_only_where_they_fit_a_small_l1(fresh_cache, block, recomputed):
    from spine.compiler.lower import LoweringChoices, lower_with_record
    signature = {name: "*fp32" for name in ("X", "DY", "W", "DX", "Mean", "Rstd")}
    signature.update(N="i32", BLOCK="constexpr")
    compiled = triton.compile(ASTSource(norm_backward_kernel, signature, {(7,): block}),
                              target=GPUTarget("cpu", "host", 1))
    after = {}
    _, record = lower_with_record(compiled.asm["linalg"], LoweringChoices(),
                                  dump=lambda index, name, text: after.__setitem__(name, text))
    assert _tile_stores(after["drop-unread-stores"], block) == 2       # xhat and w * dy
    assert ("recompute-tiles", "changed" if recomputed else "unchanged") in record.outcomes
    if recomputed:
        assert _tile_stores(after["recompute-tiles"], block) == 0
