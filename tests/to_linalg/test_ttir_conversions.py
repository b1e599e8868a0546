"""What the conversion makes of triton's float ops, fp8 values and device function calls, from TTIR text
(to_linalg/float_ops.py, fp8.py, calls.py), and how tt.dot and its transposed tiles are built (dot.py,
tile_copy.py)."""
import pytest

from tests.to_linalg.test_branches_ttir import converted
from tests.to_linalg.test_golden import filecheck

CLAMP_AND_PRECISE = """
module {
  tt.func public @k(%p: !tt.ptr<f32>) {
    %r = tt.make_range {end = 16 : i32, start = 0 : i32} : tensor<16xi32>
    %s = tt.splat %p : !tt.ptr<f32> -> tensor<16x!tt.ptr<f32>>
    %ptrs = tt.addptr %s, %r : tensor<16x!tt.ptr<f32>>, tensor<16xi32>
    %x = tt.load %ptrs : tensor<16x!tt.ptr<f32>>
    %a = tt.clampf %x, %x, %x, propagateNan = all : tensor<16xf32>
    %b = tt.clampf %a, %x, %x, propagateNan = none : tensor<16xf32>
    %c = tt.precise_divf %b, %x : tensor<16xf32>
    %d = tt.precise_sqrt %c : tensor<16xf32>
    tt.store %ptrs, %d : tensor<16x!tt.ptr<f32>>
    tt.return
  }
}
"""


def test_clamp_nan_modes_and_precise_ops(tmp_path):
    filecheck(converted(CLAMP_AND_PRECISE, tmp_path), """
CHECK: arith.maximumf
CHECK-NEXT: arith.minimumf
CHECK: arith.maxnumf
CHECK-NEXT: arith.minnumf
CHECK: arith.divf
CHECK-NOT: fastmath
CHECK: math.sqrt
""")



INT_TO_HALF = """
module {
  tt.func public @k(%p: !tt.ptr<i32>, %q: !tt.ptr<f16>) {
    %r = tt.make_range {end = 16 : i32, start = 0 : i32} : tensor<16xi32>
    %s = tt.splat %p : !tt.ptr<i32> -> tensor<16x!tt.ptr<i32>>
    %ptrs = tt.addptr %s, %r : tensor<16x!tt.ptr<i32>>, tensor<16xi32>
    %t = tt.splat %q : !tt.ptr<f16> -> tensor<16x!tt.ptr<f16>>
    %qs = tt.addptr %t, %r : tensor<16x!tt.ptr<f16>>, tensor<16xi32>
    %x = tt.load %ptrs : tensor<16x!tt.ptr<i32>>
    %h = arith.sitofp %x : tensor<16xi32> to tensor<16xf16>
    %u = arith.uitofp %x : tensor<16xi32> to tensor<16xf16>
    %v = arith.addf %h, %u : tensor<16xf16>
    tt.store %qs, %v : tensor<16x!tt.ptr<f16>>
    tt.return
  }
}
"""


def test_integers_reach_half_clamped_to_its_range(tmp_path):
    """Clamped to ±65520 (which rounds to infinity), no integer overflows half's exponent range, so
    LLVM's folding of two casts into one (which checks only the significant bits) stays exact."""
    filecheck(converted(INT_TO_HALF, tmp_path), """
CHECK-DAG: arith.constant dense<65520> : tensor<16xi32>
CHECK-DAG: arith.constant dense<-65520> : tensor<16xi32>
CHECK: arith.maxsi
CHECK-NEXT: arith.minsi
CHECK-NEXT: arith.sitofp {{.*}} : tensor<16xi32> to tensor<16xf16>
CHECK: arith.minui
CHECK-NEXT: arith.uitofp {{.*}} : tensor<16xi32> to tensor<16xf16>
""")

FP8 = """
module {
  tt.func public @k(%p: !tt.ptr<f8E5M2>, %q: !tt.ptr<f32>) {
    %r = tt.make_range {end = 16 : i32, start = 0 : i32} : tensor<16xi32>
    %s = tt.splat %p : !tt.ptr<f8E5M2> -> tensor<16x!tt.ptr<f8E5M2>>
    %ptrs = tt.addptr %s, %r : tensor<16x!tt.ptr<f8E5M2>>, tensor<16xi32>
    %t = tt.splat %q : !tt.ptr<f32> -> tensor<16x!tt.ptr<f32>>
    %qs = tt.addptr %t, %r : tensor<16x!tt.ptr<f32>>, tensor<16xi32>
    %x = tt.load %ptrs : tensor<16x!tt.ptr<f8E5M2>>
    %w = tt.fp_to_fp %x : tensor<16xf8E5M2> -> tensor<16xf32>
    tt.store %qs, %w : tensor<16x!tt.ptr<f32>>
    %y = tt.load %qs : tensor<16x!tt.ptr<f32>>
    %z = tt.fp_to_fp %y, rounding = rtne : tensor<16xf32> -> tensor<16xf8E5M2>
    tt.store %ptrs, %z : tensor<16x!tt.ptr<f8E5M2>>
    tt.return
  }
}
"""


def test_fp8_values_are_bytes(tmp_path):
    text = converted(FP8, tmp_path)
    filecheck(text, """
CHECK: func.func @k(%{{.*}}: memref<?xi8>, %{{.*}}: memref<?xf32>
CHECK: arith.extui {{.*}} : tensor<16xi8> to tensor<16xi32>
CHECK: arith.trunci {{.*}} : tensor<16xi32> to tensor<16xi8>
""")
    assert "f8E" not in text


NOINLINE = """
module {
  tt.func public @k(%p: !tt.ptr<f32>) {
    %x = tt.load %p : !tt.ptr<f32>
    %y = tt.call @twice(%x, %p) : (f32, !tt.ptr<f32>) -> f32
    tt.store %p, %y : !tt.ptr<f32>
    tt.return
  }
  tt.func private @twice(%v: f32, %q: !tt.ptr<f32>) -> f32 attributes {noinline = true} {
    %w = arith.addf %v, %v : f32
    tt.return %w : f32
  }
}
"""


def test_noinline_calls_are_inlined(tmp_path):
    text = converted(NOINLINE, tmp_path)
    filecheck(text, """
CHECK: func.func @k
CHECK-NOT: func.call
CHECK: arith.addf
""")
    assert "twice" not in text


def pointers_32x32(base: str, row_stride: str) -> str:
    """%ptrs: the addresses of a row-major 32 x 32 f32 matrix at `base`, its rows `row_stride` (a
    tensor<32x1xi32> value) apart; %row, %col and %offs on the way."""
    return f"""
    %r = tt.make_range {{end = 32 : i32, start = 0 : i32}} : tensor<32xi32>
    %row = tt.expand_dims %r {{axis = 1 : i32}} : tensor<32xi32> -> tensor<32x1xi32>
    %rows = arith.muli %row, {row_stride} : tensor<32x1xi32>
    %col = tt.expand_dims %r {{axis = 0 : i32}} : tensor<32xi32> -> tensor<1x32xi32>
    %rb = tt.broadcast %rows : tensor<32x1xi32> -> tensor<32x32xi32>
    %cb = tt.broadcast %col : tensor<1x32xi32> -> tensor<32x32xi32>
    %offs = arith.addi %rb, %cb : tensor<32x32xi32>
    %s = tt.splat {base} : !tt.ptr<f32> -> tensor<32x32x!tt.ptr<f32>>
    %ptrs = tt.addptr %s, %offs : tensor<32x32x!tt.ptr<f32>>, tensor<32x32xi32>
"""


# %ptrs: the addresses of a row-major 32 x 32 f32 matrix at %p
POINTERS_32X32 = """
    %c32 = arith.constant dense<32> : tensor<32x1xi32>""" + pointers_32x32("%p", "%c32")


def with_microkernel(text: str, microkernel=None) -> str:
    """The module text with the micro-kernel attribute the pipeline sets (none: no attribute)."""
    attributes = f'attributes {{"spine.microkernel" = "{microkernel}"}} ' if microkernel else ""
    return text.replace("MODULE_ATTRIBUTES", attributes)


DOT = """
module MODULE_ATTRIBUTES{
  tt.func public @k(%p: !tt.ptr<f32>) {
""" + POINTERS_32X32 + """    %x = tt.load %ptrs : tensor<32x32x!tt.ptr<f32>>
    %zero = arith.constant dense<0.0> : tensor<32x32xf32>
    %d = tt.dot %x, %x, %zero : tensor<32x32xf32> * tensor<32x32xf32> -> tensor<32x32xf32>
    tt.store %ptrs, %d : tensor<32x32x!tt.ptr<f32>>
    tt.return
  }
}
"""


def test_dot_takes_the_packed_matmul_the_module_names(tmp_path):
    text = converted(with_microkernel(DOT, "avx2"), tmp_path)
    filecheck(text, """
CHECK: func.func private @spine_smt_matmul_avx2_
CHECK: func.func @k
CHECK-NOT: linalg.generic
CHECK: call @spine_smt_matmul_avx2_
""")


# x [8, 8] @ y [8, N]: a small tile, as triton-cpu's tutorials multiply
SMALL_DOT = """
module attributes {"spine.microkernel" = "MICROKERNEL"} {
  tt.func public @k(%p: !tt.ptr<f32>, %q: !tt.ptr<f32>, %c: !tt.ptr<f32>) {
    %ra = tt.make_range {end = 8 : i32, start = 0 : i32} : tensor<8xi32>
    %rn = tt.make_range {end = N : i32, start = 0 : i32} : tensor<Nxi32>
    %row = tt.expand_dims %ra {axis = 1 : i32} : tensor<8xi32> -> tensor<8x1xi32>
    %c8 = arith.constant dense<8> : tensor<8x1xi32>
    %cn = arith.constant dense<N> : tensor<8x1xi32>
    %arow = arith.muli %row, %c8 : tensor<8x1xi32>
    %brow = arith.muli %row, %cn : tensor<8x1xi32>
    %acol = tt.expand_dims %ra {axis = 0 : i32} : tensor<8xi32> -> tensor<1x8xi32>
    %bcol = tt.expand_dims %rn {axis = 0 : i32} : tensor<Nxi32> -> tensor<1xNxi32>
    %ar = tt.broadcast %arow : tensor<8x1xi32> -> tensor<8x8xi32>
    %ac = tt.broadcast %acol : tensor<1x8xi32> -> tensor<8x8xi32>
    %aoffs = arith.addi %ar, %ac : tensor<8x8xi32>
    %br = tt.broadcast %brow : tensor<8x1xi32> -> tensor<8xNxi32>
    %bc = tt.broadcast %bcol : tensor<1xNxi32> -> tensor<8xNxi32>
    %boffs = arith.addi %br, %bc : tensor<8xNxi32>
    %ps = tt.splat %p : !tt.ptr<f32> -> tensor<8x8x!tt.ptr<f32>>
    %pa = tt.addptr %ps, %aoffs : tensor<8x8x!tt.ptr<f32>>, tensor<8x8xi32>
    %qs = tt.splat %q : !tt.ptr<f32> -> tensor<8xNx!tt.ptr<f32>>
    %qb = tt.addptr %qs, %boffs : tensor<8xNx!tt.ptr<f32>>, tensor<8xNxi32>
    %cs = tt.splat %c : !tt.ptr<f32> -> tensor<8xNx!tt.ptr<f32>>
    %pc = tt.addptr %cs, %boffs : tensor<8xNx!tt.ptr<f32>>, tensor<8xNxi32>
    %x = tt.load %pa : tensor<8x8x!tt.ptr<f32>>
    %y = tt.load %qb : tensor<8xNx!tt.ptr<f32>>
    %zero = arith.constant dense<0.0> : tensor<8xNxf32>
    %d = tt.dot %x, %y, %zero : tensor<8x8xf32> * tensor<8xNxf32> -> tensor<8xNxf32>
    tt.store %pc, %d : tensor<8xNx!tt.ptr<f32>>
    tt.return
  }
}
"""


@pytest.mark.parametrize("microkernel, n, b_in_place", [("avx512", 32, True), ("avx512", 64, False),
                                                        ("avx2", 16, True), ("avx2", 32, False)])
def test_a_small_dot_reads_b_in_place_when_it_is_one_panel(tmp_path, microkernel, n, b_in_place):
    """8 x 8 times 8 x N goes through the packed matmul; B is read where it is (a view of its rows, like A's)
    when its N columns are exactly one panel of the register block (AVX-512: 2 x 16, AVX2: 2 x 8), and packed
    into panels otherwise."""
    from mlir import ir
    text = converted(SMALL_DOT.replace("MICROKERNEL", microkernel).replace("N", str(n)), tmp_path)
    assert "call @spine_smt_matmul_" in text[text.index("func.func @k"):]
    with ir.Context() as context:
        context.allow_unregistered_dialects = True
        module = ir.Module.parse(text)
        matmul = next(op for op in module.body.operations
                      if ir.StringAttr(op.attributes["sym_name"]).value.startswith("spine_smt_matmul_"))
        # the first choice the function makes: whether B's columns have unit stride (in place), else A's
        first = next(op for op in matmul.regions[0].blocks[0].operations if op.name == "scf.if")
        panel = {"avx512": 32, "avx2": 16}[microkernel]
        packs = [_panel_group_loads(region, panel) for region in first.regions]
    # pack_b reads B a panel row (NV vectors: 32 or 16 lanes) at a time; in place, the kernel reads it itself
    assert (packs[0] == 0) == b_in_place and packs[1] > 0, packs


def _panel_group_loads(region, lanes: int) -> int:
    """vector.load ops in `region` (nested ones too) of `lanes` lanes: a whole panel row, as pack_b reads B
    (the micro-kernel's own loads are a register's)."""
    from mlir import ir
    count = 0
    for block in region.blocks:
        for op in block.operations:
            count += op.name == "vector.load" and ir.VectorType(op.results[0].type).shape[0] == lanes
            count += sum(_panel_group_loads(inner, lanes) for inner in op.regions)
    return count


# x[(pid * 16 + arange(16)) % n] copied to y[pid * 16 + arange(16)]: a tile through a remainder
REMAINDER_LOAD = """
module {
  tt.func public @k(%p: !tt.ptr<f32>, %q: !tt.ptr<f32>, %n: i32) {
    %pid = tt.get_program_id x : i32
    %c16 = arith.constant 16 : i32
    %start = arith.muli %pid, %c16 : i32
    %r = tt.make_range {end = 16 : i32, start = 0 : i32} : tensor<16xi32>
    %s = tt.splat %start : i32 -> tensor<16xi32>
    %i = arith.addi %s, %r : tensor<16xi32>
    %ns = tt.splat %n : i32 -> tensor<16xi32>
    %j = arith.REM %i, %ns : tensor<16xi32>
    %ps = tt.splat %p : !tt.ptr<f32> -> tensor<16x!tt.ptr<f32>>
    %pa = tt.addptr %ps, %j : tensor<16x!tt.ptr<f32>>, tensor<16xi32>
    %x = tt.load %pa : tensor<16x!tt.ptr<f32>>
    %qs = tt.splat %q : !tt.ptr<f32> -> tensor<16x!tt.ptr<f32>>
    %qa = tt.addptr %qs, %i : tensor<16x!tt.ptr<f32>>, tensor<16xi32>
    tt.store %qa, %x : tensor<16x!tt.ptr<f32>>
    tt.return
  }
}
"""


@pytest.mark.parametrize("rem", ["remsi", "remui"])
def test_a_tile_through_a_remainder_is_copied_where_it_wraps_nowhere(tmp_path, rem):
    """The remainder's first element (start % n) and the condition that no element of the tile wraps
    (start >= 0, n > 0, start % n + 15 < n); a strided copy from start % n under it, a gather of the exact
    addresses otherwise (spine/to_linalg/wraparound.py)."""
    filecheck(converted(REMAINDER_LOAD.replace("REM", rem), tmp_path), """
CHECK: %[[START:.*]] = arith.index_cast %{{.*}} : i32 to index
CHECK: %[[N:.*]] = arith.index_cast %arg2 : i32 to index
CHECK: %[[FIRST:.*]] = arith.remsi %[[START]], %{{.*}} : index
CHECK: %[[LAST:.*]] = arith.addi %[[FIRST]], %c15 : index
CHECK: arith.cmpi slt, %[[LAST]], %[[N]] : index
CHECK: scf.if %{{.*}} -> (tensor<16xf32>) {
CHECK: memref.reinterpret_cast %arg0 to offset: [%[[FIRST]]], sizes: [16], strides: [1]
CHECK: } else {
CHECK: arith.{{remsi|remui}} %{{.*}} : tensor<16xi32>
CHECK: scf.for
CHECK: memref.load %arg0[%{{.*}}] : memref<?xf32>
""")


def test_dot_without_a_named_microkernel_is_a_generic_loop_nest(tmp_path):
    filecheck(converted(with_microkernel(DOT), tmp_path), """
CHECK-NOT: spine_smt_matmul
CHECK: linalg.generic
CHECK-SAME: iterator_types = ["parallel", "reduction", "parallel"]
""")


def transposed_pointers_32x32(base: str, column_stride: str, name: str) -> str:
    """%<name>: the addresses of a 32 x 32 f32 matrix at `base` stored by columns, `column_stride` (a
    tensor<1x32xi32> value) apart: element (i, j) at j * stride + i; from %row and %col."""
    return f"""
    %{name}_cols = arith.muli %col, {column_stride} : tensor<1x32xi32>
    %{name}_rb = tt.broadcast %row : tensor<32x1xi32> -> tensor<32x32xi32>
    %{name}_cb = tt.broadcast %{name}_cols : tensor<1x32xi32> -> tensor<32x32xi32>
    %{name}_offs = arith.addi %{name}_rb, %{name}_cb : tensor<32x32xi32>
    %{name}_s = tt.splat {base} : !tt.ptr<f32> -> tensor<32x32x!tt.ptr<f32>>
    %{name} = tt.addptr %{name}_s, %{name}_offs : tensor<32x32x!tt.ptr<f32>>, tensor<32x32xi32>
"""


TRANSPOSED_DOT = """
module MODULE_ATTRIBUTES{
  tt.func public @k(%p: !tt.ptr<f32>) {
    %r = tt.make_range {end = 32 : i32, start = 0 : i32} : tensor<32xi32>
    %row = tt.expand_dims %r {axis = 1 : i32} : tensor<32xi32> -> tensor<32x1xi32>
    %col = tt.expand_dims %r {axis = 0 : i32} : tensor<32xi32> -> tensor<1x32xi32>
    %c32 = arith.constant dense<32> : tensor<1x32xi32>""" + transposed_pointers_32x32("%p", "%c32", "ptrs") + """    %x = tt.load %ptrs : tensor<32x32x!tt.ptr<f32>>
    %zero = arith.constant dense<0.0> : tensor<32x32xf32>
    %d = tt.dot %x, %x, %zero : tensor<32x32xf32> * tensor<32x32xf32> -> tensor<32x32xf32>
    tt.store %ptrs, %d : tensor<32x32x!tt.ptr<f32>>
    tt.return
  }
}
"""


@pytest.mark.parametrize("microkernel, block, shuffles", [("avx512", 16, 64), ("avx2", 8, 24)])
def test_x86_transposes_a_tile_read_across_rows_in_registers(tmp_path, microkernel, block, shuffles):
    """Element (i, j) at j * 32 + i: copied by blocks as wide as the vectors, of row loads, shuffles and
    row stores."""
    filecheck(converted(with_microkernel(TRANSPOSED_DOT, microkernel), tmp_path), f"""
CHECK: func.func @k
CHECK: scf.for
CHECK: vector.load {{{{.*}}}} : memref<32x32xf32, strided<[32, 1]>>, vector<{block}xf32>
CHECK-COUNT-{shuffles}: vector.shuffle
CHECK-NOT: vector.shuffle
CHECK: vector.store {{{{.*}}}} : memref<32x32xf32>, vector<{block}xf32>
""")


def test_rvv_copies_a_tile_read_across_rows_with_strided_stores(tmp_path):
    text = converted(with_microkernel(TRANSPOSED_DOT, "rvv"), tmp_path)
    filecheck(text, """
CHECK: memref.transpose
CHECK: linalg.copy
""")
    assert "vector.shuffle" not in text


# A row-major 32 x 32 tile of %p stored transposed into %q: element (i, j) at j * %n + i, masked to the
# rows and columns below %n.
TRANSPOSED_STORE = """
module MODULE_ATTRIBUTES{
  tt.func public @k(%p: !tt.ptr<f32>, %q: !tt.ptr<f32>, %n: i32) {
    %c32 = arith.constant dense<32> : tensor<32x1xi32>""" + pointers_32x32("%p", "%c32") + """    %x = tt.load %ptrs : tensor<32x32x!tt.ptr<f32>>
    %nr = tt.splat %n : i32 -> tensor<1x32xi32>""" + transposed_pointers_32x32("%q", "%nr", "qp") + """    %nrow = tt.splat %n : i32 -> tensor<32x1xi32>
    %rm = arith.cmpi slt, %row, %nrow : tensor<32x1xi32>
    %cm = arith.cmpi slt, %col, %nr : tensor<1x32xi32>
    %rmb = tt.broadcast %rm : tensor<32x1xi1> -> tensor<32x32xi1>
    %cmb = tt.broadcast %cm : tensor<1x32xi1> -> tensor<32x32xi1>
    %mask = arith.andi %rmb, %cmb : tensor<32x32xi1>
    tt.store %qp, %x, %mask : tensor<32x32x!tt.ptr<f32>>
    tt.return
  }
}
"""


@pytest.mark.parametrize("microkernel, block, shuffles", [("avx512", 16, 64), ("avx2", 8, 24)])
def test_x86_writes_a_whole_tile_across_the_destinations_rows_by_blocks(tmp_path, microkernel, block, shuffles):
    """A whole window: the tile into a local buffer, then row loads, shuffles and stores into the
    destination's rows (its transposed view); a partial one: its window through the strided view."""
    filecheck(converted(with_microkernel(TRANSPOSED_STORE, microkernel), tmp_path), f"""
CHECK: func.func @k
CHECK: scf.if
CHECK: bufferization.materialize_in_destination {{{{.*}}}} : (tensor<?x?xf32>, memref<?x?xf32, strided<[1, ?]{{{{.*}}}}>>)
CHECK: }} else {{
CHECK: bufferization.materialize_in_destination {{{{.*}}}} : (tensor<32x32xf32>, memref<32x32xf32>)
CHECK: memref.transpose
CHECK: scf.for
CHECK: vector.load {{{{.*}}}} : memref<32x32xf32>, vector<{block}xf32>
CHECK-COUNT-{shuffles}: vector.shuffle
CHECK-NOT: vector.shuffle
CHECK: vector.store {{{{.*}}}} : memref<32x32xf32, strided<[?, 1]{{{{.*}}}}>>, vector<{block}xf32>
""")


@pytest.mark.parametrize("microkernel", ["rvv", None])
def test_a_tile_written_across_rows_without_register_transposes_goes_through_the_strided_view(tmp_path,
                                                                                               microkernel):
    text = converted(with_microkernel(TRANSPOSED_STORE, microkernel), tmp_path)
    assert "vector.shuffle" not in text and "memref.transpose" not in text
    assert text.count("bufferization.materialize_in_destination") == 1


# %mask: row < %n and column < %n, from %row, %col (32 x 1, 1 x 32) and %nr (%n as 32 x 1)
MASK_BELOW_N = """    %rmask = arith.cmpi slt, %row, %nr : tensor<32x1xi32>
    %nc = tt.splat %n : i32 -> tensor<1x32xi32>
    %cmask = arith.cmpi slt, %col, %nc : tensor<1x32xi32>
    %rm = tt.broadcast %rmask : tensor<32x1xi1> -> tensor<32x32xi1>
    %cm = tt.broadcast %cmask : tensor<1x32xi1> -> tensor<32x32xi1>
    %mask = arith.andi %rm, %cm : tensor<32x32xi1>
"""

MASKED_DOT = """
module attributes {"spine.microkernel" = "avx512"} {
  tt.func public @k(%p: !tt.ptr<f32>, %n: i32) {
""" + POINTERS_32X32 + """    %nr = tt.splat %n : i32 -> tensor<32x1xi32>
""" + MASK_BELOW_N + """    %zero = arith.constant dense<0.0> : tensor<32x32xf32>
    %x = tt.load %ptrs, %mask, %zero : tensor<32x32x!tt.ptr<f32>>
    %d = tt.dot %x, %x, %zero : tensor<32x32xf32> * tensor<32x32xf32> -> tensor<32x32xf32>
    tt.store %ptrs, %d : tensor<32x32x!tt.ptr<f32>>
    tt.return
  }
}
"""


def test_a_masked_tile_read_along_its_rows_is_copied_through_its_window(tmp_path):
    """Only a tile read across its source's rows gets the whole-tile branch of register transposes."""
    text = converted(MASKED_DOT, tmp_path)
    kernel = text[text.index("func.func @k"):]
    assert "vector.shuffle" not in kernel and "memref.transpose" not in kernel
    assert "} else {" not in kernel
    filecheck(kernel, """
CHECK: scf.if
CHECK-NEXT: linalg.fill
CHECK: linalg.copy {{.*}} outs(%{{.*}} : memref<?x?xf32
""")


# A masked 32 x 32 tile of the read-only %a (rows of %n columns) times itself, stored into %c.
READ_ONLY_DOT = """
module MODULE_ATTRIBUTES{
  tt.func public @k(%a: !tt.ptr<f32>, %c: !tt.ptr<f32>, %n: i32) {
    %nr = tt.splat %n : i32 -> tensor<32x1xi32>""" + pointers_32x32("%a", "%nr") + MASK_BELOW_N + """    %zero = arith.constant dense<0.0> : tensor<32x32xf32>
    %x = tt.load %ptrs, %mask, %zero : tensor<32x32x!tt.ptr<f32>>
    %d = tt.dot %x, %x, %zero : tensor<32x32xf32> * tensor<32x32xf32> -> tensor<32x32xf32>
    %t = tt.splat %c : !tt.ptr<f32> -> tensor<32x32x!tt.ptr<f32>>
    %out = tt.addptr %t, %offs : tensor<32x32x!tt.ptr<f32>>, tensor<32x32xi32>
    tt.store %out, %d, %mask : tensor<32x32x!tt.ptr<f32>>
    tt.return
  }
}
"""


def _converted_with_direct_loads(text: str, tmp_path) -> str:
    from spine.compiler.export import export_generic
    from spine.to_linalg import convert_ttir
    from tests.to_linalg.test_branches_ttir import parse_ttir, without_locations
    kernel = convert_ttir(export_generic(parse_ttir(text, tmp_path)), direct_loads=True)
    assert kernel.direct_load_args == (0,)
    return without_locations(kernel.text)


def test_a_packed_dot_reads_whole_tiles_of_a_read_only_argument_in_place(tmp_path):
    """The packed matmul packs (or reads in place) its operands itself: only the edge tile is copied."""
    kernel = _converted_with_direct_loads(with_microkernel(READ_ONLY_DOT, "avx512"), tmp_path)
    filecheck(kernel[kernel.index("func.func @k"):], """
CHECK: scf.if
CHECK: linalg.copy
CHECK: } else {
CHECK-NEXT: memref.reinterpret_cast
CHECK-NEXT: bufferization.to_tensor {{.*}} restrict :
CHECK-NOT: linalg.copy
CHECK: call @spine_smt_matmul_avx512_
""")


def test_a_generic_dot_copies_its_operand_tiles(tmp_path):
    """Its loops read each element many times: from a contiguous tile, not through run-time strides."""
    kernel = _converted_with_direct_loads(with_microkernel(READ_ONLY_DOT), tmp_path)
    kernel = kernel[kernel.index("func.func @k"):]
    assert "} else {" not in kernel.split("linalg.generic")[0]


# acc = dot(x, B, acc) four times in a loop, x a 32 x 32 tile of %p whose rows from %m on are masked off
# and filled with FILL, B either x itself or %y, a whole tile of %q.
PADDED_ROWS_DOT = """
module attributes {"spine.microkernel" = "avx512"} {
  tt.func public @k(%p: !tt.ptr<f32>, %q: !tt.ptr<f32>, %c: !tt.ptr<f32>, %m: i32) {
""" + POINTERS_32X32 + """    %mr = tt.splat %m : i32 -> tensor<32x1xi32>
    %rmask = arith.cmpi slt, %row, %mr : tensor<32x1xi32>
    %mask = tt.broadcast %rmask : tensor<32x1xi1> -> tensor<32x32xi1>
    %zero = arith.constant dense<0.0> : tensor<32x32xf32>
    %fill = arith.constant dense<FILL> : tensor<32x32xf32>
    %qs = tt.splat %q : !tt.ptr<f32> -> tensor<32x32x!tt.ptr<f32>>
    %qptrs = tt.addptr %qs, %offs : tensor<32x32x!tt.ptr<f32>>, tensor<32x32xi32>
    %c0 = arith.constant 0 : i32
    %c1 = arith.constant 1 : i32
    %c4 = arith.constant 4 : i32
    %acc = scf.for %i = %c0 to %c4 step %c1 iter_args(%acc0 = %zero) -> (tensor<32x32xf32>) : i32 {
      %x = tt.load %ptrs, %mask, %fill : tensor<32x32x!tt.ptr<f32>>
      %y = tt.load %qptrs : tensor<32x32x!tt.ptr<f32>>
      %d = tt.dot %x, B_TILE, %acc0 : tensor<32x32xf32> * tensor<32x32xf32> -> tensor<32x32xf32>
      scf.yield %d : tensor<32x32xf32>
    }
    %t = tt.splat %c : !tt.ptr<f32> -> tensor<32x32x!tt.ptr<f32>>
    %out = tt.addptr %t, %offs : tensor<32x32x!tt.ptr<f32>>, tensor<32x32xi32>
    tt.store %out, %acc : tensor<32x32x!tt.ptr<f32>>
    tt.return
  }
}
"""


@pytest.mark.parametrize("fill, bounded", [("0.0", True), ("-0.0", False), ("1.0", False)])
def test_a_packed_dot_skips_rows_of_zero_padding(tmp_path, fill, bounded):
    """The rows a mask fills with +0.0 add nothing to an accumulator updated in place: the packed matmul
    gets the count of the others and skips the register blocks past it."""
    text = converted(PADDED_ROWS_DOT.replace("FILL", fill).replace("B_TILE", "%x"), tmp_path)
    call = next(line for line in text.splitlines() if "call @spine_smt_matmul_avx512_" in line)
    assert call.rstrip().endswith("index) -> ()") == bounded, call


@pytest.mark.parametrize("acc, arguments", [("0.0", 3), ("-0.0", 4), ("1.0", 4)])
def test_a_packed_dot_onto_positive_zero_reads_no_accumulator(tmp_path, acc, arguments):
    """tl.dot(a, b) adds to +0.0, where the packed matmul's sums start anyway: the call gets A, B and C."""
    text = converted(with_microkernel(DOT, "avx2").replace("dense<0.0>", f"dense<{acc}>"), tmp_path)
    call = next(line for line in text.splitlines() if "call @spine_smt_matmul_avx2_" in line)
    assert call.split(":")[0].count("%") == arguments, call


def _padded_a_loop(tmp_path) -> str:
    """The loop of PADDED_ROWS_DOT's kernel times %q's tile, zero filled, converted with loads of read-only
    arguments in place."""
    from spine.compiler.export import export_generic
    from spine.to_linalg import convert_ttir
    from tests.to_linalg.test_branches_ttir import parse_ttir, without_locations
    text = PADDED_ROWS_DOT.replace("FILL", "0.0").replace("B_TILE", "%y")
    kernel = convert_ttir(export_generic(parse_ttir(text, tmp_path)), direct_loads=True)
    assert kernel.direct_load_args == (0, 1)
    text = without_locations(kernel.text)
    return text[text.index("scf.for", text.index("func.func @k")):]


def test_rows_a_packed_dot_never_reads_are_not_copied(tmp_path):
    """Masked by rows alone, A's tile is read in place even where the mask ends inside it: the packed
    matmul reads A only below the bound it gets (smt_microkernel.py)."""
    loop = _padded_a_loop(tmp_path)
    assert "linalg.fill" not in loop and "linalg.copy" not in loop.split("call @spine_smt_matmul")[0]
    call = next(line for line in loop.splitlines() if "call @spine_smt_matmul_avx512_" in line)
    assert call.rstrip().endswith("index) -> ()"), call


def test_rows_past_the_bound_are_zeroed_for_a_dot_not_given_it(tmp_path, monkeypatch):
    """Should the packed matmul not take the bound after all, it gets a copy with those rows zero."""
    from spine.to_linalg import smt_dot
    monkeypatch.setattr(smt_dot, "_updates_in_place", lambda *args: False)
    filecheck(_padded_a_loop(tmp_path), """
CHECK-DAG: tensor.extract_slice {{.*}} to tensor<?x32xf32>
CHECK-DAG: linalg.fill
CHECK: tensor.insert_slice
CHECK: call @spine_smt_matmul_avx512_
""")
