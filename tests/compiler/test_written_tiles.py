"""Edge tiles copied from arguments the kernel writes become edge-tile branches when nothing writes memory
before their last read (compiler/written_tiles.py): IR text as bufferization leaves the copy, and kernels
that read, change and store back a masked tile, against torch on both targets."""
import pytest
import torch
import triton
import triton.language as tl

from spine.compiler.edge_tile_reads import MARK, mark_edge_tiles
from spine.compiler.written_tiles import read_written_tiles_as_edge_tiles
from tests.compiler.ir_rewrites import rewritten
from tests.to_linalg.test_golden import filecheck

# A masked tl.load of %arg, an argument the kernel also writes, as bufferization leaves it: filled past
# lane %n when the window is partial, copied below it; then a linalg op reads the tile (BETWEEN: what
# comes between the copy and that read; READER: the read).
COPIED = """
#map = affine_map<(d0) -> (d0)>
func.func private @opaque()
func.func @k(%arg: memref<?xf16>, %out: memref<?xf32>, %n: index, %o: index) {
  %c0 = arith.constant 0 : index
  %c1024 = arith.constant 1024 : index
  %zero = arith.constant 0.0 : f16
  %one = arith.constant 1.0 : f32
  %buf = memref.alloca() : memref<1024xf16>
  %acc = memref.alloca() : memref<1024xf32>
  %partial = arith.cmpi ne, %n, %c1024 : index
  scf.if %partial {
    %rest = arith.subi %c1024, %n : index
    %tail = memref.subview %buf[%n] [%rest] [1] : memref<1024xf16> to memref<?xf16, strided<[1], offset: ?>>
    linalg.fill ins(%zero : f16) outs(%tail : memref<?xf16, strided<[1], offset: ?>>)
  }
  %w = memref.reinterpret_cast %arg to offset: [%o], sizes: [%n], strides: [1] : memref<?xf16> to memref<?xf16, strided<[1], offset: ?>>
  %head = memref.subview %buf[0] [%n] [1] : memref<1024xf16> to memref<?xf16, strided<[1]>>
  linalg.copy ins(%w : memref<?xf16, strided<[1], offset: ?>>) outs(%head : memref<?xf16, strided<[1]>>)
  BETWEEN
  READER
  return
}
"""
READ = """linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%buf : memref<1024xf16>) outs(%acc : memref<1024xf32>) {
  ^bb0(%in: f16, %prev: f32):
    %e = arith.extf %in : f16 to f32
    linalg.yield %e : f32
  }"""


def rewrite(between: str = "", reader: str = READ) -> str:
    return rewritten(COPIED.replace("BETWEEN", between).replace("READER", reader),
                     read_written_tiles_as_edge_tiles)


def note(between: str = "", reader: str = READ):
    """What the rewrite says it kept."""
    from mlir import ir
    with ir.Context(), ir.Location.unknown():
        return read_written_tiles_as_edge_tiles(ir.Module.parse(COPIED.replace("BETWEEN", between)
                                                                .replace("READER", reader)))


def test_a_copied_tile_read_by_a_local_computation_becomes_an_edge_tile_branch():
    text = rewrite()
    filecheck(text, """
CHECK: %[[TILE:.*]] = scf.if %{{.*}} -> (memref<1024xf16, strided<[1], offset: ?>>) {
CHECK: scf.if
CHECK: linalg.fill
CHECK: %[[W:.*]] = memref.reinterpret_cast %arg0 to offset: [%arg3], sizes: [%arg2], strides: [1]
CHECK: linalg.copy ins(%[[W]]
CHECK: %[[CAST:.*]] = memref.cast %{{.*}} : memref<1024xf16> to memref<1024xf16, strided<[1], offset: ?>>
CHECK-NEXT: scf.yield %[[CAST]]
CHECK-NEXT: } else {
CHECK-NEXT: %[[WHOLE:.*]] = memref.reinterpret_cast %arg0 to offset: [%arg3], sizes: [1024], strides: [1]
CHECK-NEXT: scf.yield %[[WHOLE]]
CHECK: linalg.generic {{.*}} ins(%[[TILE]] : memref<1024xf16, strided<[1], offset: ?>>)
""")
    # the form edge_tile_reads.py takes apart
    assert MARK in rewritten(text, mark_edge_tiles)
    assert note() is None


def test_a_local_store_between_leaves_the_rewrite_sound():
    assert "-> (memref<1024xf16" in rewrite(between="memref.store %one, %acc[%c0] : memref<1024xf32>")


@pytest.mark.parametrize("between", [
    "memref.store %one, %out[%c0] : memref<?xf32>",              # an argument: it may overlap %arg
    "func.call @opaque() : () -> ()",                            # a call may write anything
    "%old = memref.atomic_rmw addf %one, %out[%c0] : (f32, memref<?xf32>) -> f32",
    "linalg.fill ins(%one : f32) outs(%out : memref<?xf32>)",
])
def test_a_write_that_may_reach_the_argument_keeps_the_copy(between):
    assert "-> (memref<1024xf16" not in rewrite(between=between)
    op = between.split(" = ")[-1].split(" ")[0]
    assert note(between=between) == ("kept 1 of 1 copies of edge tiles of written arguments (first: "
                                     f"{op} may write the argument before the tile's last read)")


def test_a_read_that_also_writes_the_tile_keeps_the_copy():
    writes_back = READ.replace("outs(%acc : memref<1024xf32>)", "outs(%buf : memref<1024xf16>)") \
        .replace("%prev: f32", "%prev: f16").replace("%e = arith.extf %in : f16 to f32", "%e = arith.addf %in, %in : f16") \
        .replace("linalg.yield %e : f32", "linalg.yield %e : f16")
    assert "-> (memref<1024xf16" not in rewrite(reader=writes_back)
    assert "used other than by local computations" in note(reader=writes_back)


def test_a_copy_without_its_fill_is_left_alone():
    source = COPIED.replace("BETWEEN", "").replace("READER", READ)
    start = source.index("  scf.if %partial {")
    source = source[:start] + source[source.index("  }\n", start) + 4:]
    assert "-> (memref<1024xf16" not in rewritten(source, read_written_tiles_as_edge_tiles)


@triton.jit
def accumulate_rows_kernel(acc_ptr, x_ptr, sums_ptr, n, BLOCK: tl.constexpr):
    """acc[row] += 2 x[row] and its sum, masked: the tile of acc is read, added to on the stack (the sum
    reads the result too) and stored back."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n
    acc = tl.load(acc_ptr + row * n + cols, mask=mask, other=0.0)
    x = tl.load(x_ptr + row * n + cols, mask=mask, other=0.0)
    total = acc + 2 * x
    tl.store(acc_ptr + row * n + cols, total, mask=mask)
    tl.store(sums_ptr + row, tl.sum(total, axis=0))


def passes_of(kernel, tmp_path, monkeypatch, *args, **constants) -> str:
    """The pass list SPINE_DUMP_PASSES writes for one launch of `kernel`."""
    monkeypatch.setenv("SPINE_DUMP_PASSES", str(tmp_path))
    kernel[(args[0].shape[0] if args[0].dim() > 1 else 1,)](*args, **constants)
    return (tmp_path / f"{kernel.__name__}.passes.txt").read_text()


@pytest.mark.parametrize("n", [1, 45, 128, 300])
def test_masked_read_modify_write(target, n):
    acc, x, sums = torch.randn(3, n), torch.randn(3, n), torch.empty(3)
    expected = acc + 2 * x
    accumulate_rows_kernel[(3,)](acc, x, sums, n, BLOCK=triton.next_power_of_2(n))
    torch.testing.assert_close(acc, expected)
    torch.testing.assert_close(sums, expected.sum(dim=1))


def test_the_read_modify_write_reads_its_tile_in_place(tmp_path, monkeypatch):
    from spine.driver import CPUDriver
    triton.runtime.driver.set_active(CPUDriver(target="host"))
    acc, x, sums = torch.randn(3, 45), torch.randn(3, 45), torch.empty(3)
    text = passes_of(accumulate_rows_kernel, tmp_path, monkeypatch, acc, x, sums, 45, BLOCK=64)
    assert "written-edge-tiles: changed" in text, text


@triton.jit
def copy_then_clear_kernel(a_ptr, b_ptr, out_ptr, sums_ptr, n, BLOCK: tl.constexpr):
    """out = a + 1 and its sum, computed after b is cleared: a and b may be one tensor."""
    cols = tl.arange(0, BLOCK)
    mask = cols < n
    a = tl.load(a_ptr + cols, mask=mask, other=0.0)
    tl.store(b_ptr + cols, tl.zeros([BLOCK], tl.float32), mask=mask)
    s = a + 1.0
    tl.store(out_ptr + cols, s, mask=mask)
    tl.store(sums_ptr, tl.sum(s, axis=0))


@pytest.mark.parametrize("n", [45, 64])
def test_a_tile_read_after_a_store_through_an_alias_keeps_its_values(target, n):
    a, out, sums = torch.randn(n), torch.empty(n), torch.empty(1)
    expected = a + 1.0
    copy_then_clear_kernel[(1,)](a, a, out, sums, n, BLOCK=64)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(sums, (expected.sum() + (64 - n)).reshape(1))   # masked lanes: 0 + 1
    assert torch.all(a == 0)
