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


def _with_window_stride(stride: int, lanes: str = "1024") -> str:
    """COPIED and READ for a tile of `lanes` lanes whose window of %arg has the static stride `stride`."""
    window = "strided<[1], offset: ?>>) outs(%head"
    source = COPIED.replace("BETWEEN", "").replace("READER", READ)
    source = source.replace("sizes: [%n], strides: [1] : memref<?xf16> to memref<?xf16, strided<[1], offset: ?>>",
                            f"sizes: [%n], strides: [{stride}] : memref<?xf16> to memref<?xf16, strided<[{stride}], "
                            "offset: ?>>")
    source = source.replace(window, window.replace("[1]", f"[{stride}]"))
    return source.replace("1024", lanes)


def test_a_one_element_tile_takes_its_buffers_stride():
    """A one-element load's window has stride 0, which no memref.cast of the buffer (stride 1) reaches:
    both branches take the buffer's stride, which reaches the same element."""
    text = rewritten(_with_window_stride(0, lanes="1"), read_written_tiles_as_edge_tiles)
    filecheck(text, """
CHECK: %[[TILE:.*]] = scf.if %{{.*}} -> (memref<1xf16, strided<[1], offset: ?>>) {
CHECK: memref.cast %{{.*}} : memref<1xf16> to memref<1xf16, strided<[1], offset: ?>>
CHECK: } else {
CHECK-NEXT: memref.reinterpret_cast %arg0 to offset: [%arg3], sizes: [1], strides: [1]
""")


def test_a_window_strided_unlike_its_tile_keeps_the_copy():
    from mlir import ir
    source = _with_window_stride(2)
    assert "-> (memref<1024xf16" not in rewritten(source, read_written_tiles_as_edge_tiles)
    with ir.Context(), ir.Location.unknown():
        assert read_written_tiles_as_edge_tiles(ir.Module.parse(source)) == (
            "kept 1 of 1 copies of edge tiles of written arguments (first: the window's stride is not the tile's)")


# The tile read through the window a masked store computes (stores_in_place.py), by an op that writes
# OUT: a local buffer's window, or the argument's own window at OFFSET.
THROUGH_A_VIEW = """%v = memref.subview %buf[0] [%n] [1] : memref<1024xf16> to memref<?xf16, strided<[1]>>
  %target = memref.reinterpret_cast %arg to offset: [OFFSET], sizes: [%n], strides: [1] : memref<?xf16> to memref<?xf16, strided<[1], offset: ?>>
  linalg.generic {indexing_maps = [#map, #map], iterator_types = [ITERATOR]} ins(%v : memref<?xf16, strided<[1]>>) outs(%target : memref<?xf16, strided<[1], offset: ?>>) {
  ^bb0(%in: f16, %prev: f16):
    %d = arith.addf %in, %in : f16
    linalg.yield %d : f16
  }"""


def through_a_view(offset: str = "%o", iterator: str = '"parallel"') -> str:
    return THROUGH_A_VIEW.replace("OFFSET", offset).replace("ITERATOR", iterator)


def test_a_read_through_a_view_that_writes_the_tiles_own_window_goes_in_place():
    """Each element is read before the same iteration writes it, and no other iteration writes it."""
    text = rewrite(reader=through_a_view())
    filecheck(text, """
CHECK: %[[TILE:.*]] = scf.if %{{.*}} -> (memref<1024xf16, strided<[1], offset: ?>>) {
CHECK: %[[VIEW:.*]] = memref.subview %[[TILE]][0] [%arg2] [1] : memref<1024xf16, strided<[1], offset: ?>> to memref<?xf16, strided<[1], offset: ?>>
CHECK: linalg.generic {{.*}} ins(%[[VIEW]] :
""")
    assert note(reader=through_a_view()) is None


@pytest.mark.parametrize("offset,iterator", [("%c0", '"parallel"'),       # another place of the argument
                                             ("%o", '"reduction"')])      # many iterations write one element
def test_a_write_elsewhere_than_where_each_element_was_read_keeps_the_copy(offset, iterator):
    reader = through_a_view(offset, iterator)
    assert "-> (memref<1024xf16" not in rewrite(reader=reader)
    assert "linalg.generic may write the argument" in note(reader=reader)


def test_a_read_through_a_view_of_fewer_dimensions_keeps_the_copy():
    """A reduction's first element, read through a rank-reducing view."""
    first = ("%v = memref.subview %buf[0] [1] [1] : memref<1024xf16> to memref<f16>\n"
             "  %f = memref.load %v[] : memref<f16>\n"
             "  %fe = arith.extf %f : f16 to f32\n"
             "  memref.store %fe, %acc[%c0] : memref<1024xf32>")
    assert "-> (memref<1024xf16" not in rewrite(reader=first)
    assert "used other than by local computations" in note(reader=first)


def test_a_writing_reader_that_is_not_the_last_keeps_the_copy():
    """A read after it would see what it wrote, where the copy kept the values from before."""
    assert "-> (memref<1024xf16" not in rewrite(reader=through_a_view() + "\n  " + READ)


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


@triton.jit
def add_in_place_kernel(acc_ptr, x_ptr, n, BLOCK: tl.constexpr):
    """acc[row] += 2 x[row], masked, stored straight back."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n
    acc = tl.load(acc_ptr + row * n + cols, mask=mask, other=0.0)
    x = tl.load(x_ptr + row * n + cols, mask=mask, other=0.0)
    tl.store(acc_ptr + row * n + cols, acc + 2 * x, mask=mask)


@pytest.mark.parametrize("n", [1, 45, 128, 300])
def test_masked_read_modify_write(target, n):
    acc, x, sums = torch.randn(3, n), torch.randn(3, n), torch.empty(3)
    expected = acc + 2 * x
    accumulate_rows_kernel[(3,)](acc, x, sums, n, BLOCK=triton.next_power_of_2(n))
    torch.testing.assert_close(acc, expected)
    torch.testing.assert_close(sums, expected.sum(dim=1))
    add_in_place_kernel[(3,)](acc, x, n, BLOCK=triton.next_power_of_2(n))
    torch.testing.assert_close(acc, expected + 2 * x)


@pytest.mark.parametrize("kernel", [accumulate_rows_kernel, add_in_place_kernel])
def test_the_read_modify_writes_read_their_tiles_in_place(kernel, tmp_path, monkeypatch):
    from spine.driver import CPUDriver
    triton.runtime.driver.set_active(CPUDriver(target="host"))
    acc, x, sums = torch.randn(3, 45), torch.randn(3, 45), torch.empty(3)
    args = (acc, x, sums, 45) if kernel is accumulate_rows_kernel else (acc, x, 45)
    text = passes_of(kernel, tmp_path, monkeypatch, *args, BLOCK=64)
    assert "written-edge-tiles: changed" in text, text


@triton.jit
def shifted_copy_kernel(a_ptr, b_ptr, n, BLOCK: tl.constexpr):
    """b = a + 1, masked; b may be a one element further on (the launcher's alias-safe variant: written_tiles.py
    must not read a in place after b's stores begin either)."""
    cols = tl.arange(0, BLOCK)
    mask = cols < n
    tl.store(b_ptr + cols, tl.load(a_ptr + cols, mask=mask, other=0.0) + 1.0, mask=mask)


@pytest.mark.parametrize("n", [45, 64])
def test_a_store_into_an_overlapping_argument_reads_the_values_from_before(target, n):
    storage = torch.randn(n + 1)
    expected = storage[:-1] + 1.0
    shifted_copy_kernel[(1,)](storage[:-1], storage[1:], n, BLOCK=64)
    torch.testing.assert_close(storage[1:], expected)


@triton.jit(do_not_specialize=["trips"])
def replaced_in_a_loop_kernel(x_ptr, trips, out_ptr, n, BLOCK: tl.constexpr):
    """out = 2 x, or the program id after `trips` > 0 trips of a loop: x and out may be one tensor."""
    r = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = r < n
    acc = tl.load(x_ptr + r, mask=mask) * 2.0
    for _ in range(0, trips):
        acc = tl.broadcast_to(tl.program_id(0).to(tl.float32), (BLOCK,))
    tl.store(out_ptr + r, acc, mask=mask)


@pytest.mark.parametrize("trips", [0, 1])
def test_a_one_element_tile_of_an_argument_written_in_place(target, trips):
    """One lane read and written back in place (the launcher's alias-safe variant), whose window has
    stride 0 (it failed to compile: a memref.cast no stride reached)."""
    storage = torch.randn(3)
    expected = 2 * storage if trips == 0 else torch.arange(3, dtype=torch.float32)
    replaced_in_a_loop_kernel[(3,)](storage, trips, storage, 3, BLOCK=1)
    torch.testing.assert_close(storage, expected)


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
