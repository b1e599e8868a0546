"""A load at the top of a kernel first prefetches the tile the next program instance will load
(to_linalg/prefetch.py), from TTIR text: a row-wise kernel's row, which moves with the program id and
feeds a reduction; a tile that is the same in every program, an elementwise kernel's, a load inside a
loop, or a module the pipeline did not mark for prefetching gets no prefetch."""
import pytest

from tests.to_linalg.test_branches_ttir import converted
from tests.to_linalg.test_golden import filecheck
from tests.to_linalg.test_ttir_conversions import with_microkernel


def prefetching(text: str, microkernel="avx512") -> str:
    """The module with the attributes the pipeline sets for an Intel core."""
    return with_microkernel(text, microkernel).replace(
        '"spine.microkernel"', '"spine.prefetch_next_program", "spine.microkernel"')

# %y: x * w scaled by the sum of x * w (a reduction), or x * w itself (elementwise)
SCALED_BY_SUM = """%sum = "tt.reduce"(%xw) <{axis = 0 : i32}> ({
    ^bb0(%a: f32, %b: f32):
      %c = arith.addf %a, %b : f32
      tt.reduce.return %c : f32
    }) : (tensor<1024xf32>) -> f32
    %sums = tt.splat %sum : f32 -> tensor<1024xf32>
    %y = arith.divf %xw, %sums : tensor<1024xf32>"""
ELEMENTWISE = "%y = arith.addf %xw, %xw : tensor<1024xf32>"

ROW_AND_WEIGHTS = """
module MODULE_ATTRIBUTES{
  tt.func public @k(%x: !tt.ptr<f32>, %w: !tt.ptr<f32>, %o: !tt.ptr<f32>, %stride: i32, %n: i32) {
    %pid = tt.get_program_id x : i32
    %start = arith.muli %pid, %stride : i32
    %cols = tt.make_range {end = 1024 : i32, start = 0 : i32} : tensor<1024xi32>
    %nb = tt.splat %n : i32 -> tensor<1024xi32>
    %mask = arith.cmpi slt, %cols, %nb : tensor<1024xi32>
    %row = tt.addptr %x, %start : !tt.ptr<f32>, i32
    %rs = tt.splat %row : !tt.ptr<f32> -> tensor<1024x!tt.ptr<f32>>
    %rp = tt.addptr %rs, %cols : tensor<1024x!tt.ptr<f32>>, tensor<1024xi32>
    %xv = tt.load %rp, %mask : tensor<1024x!tt.ptr<f32>>
    %ws = tt.splat %w : !tt.ptr<f32> -> tensor<1024x!tt.ptr<f32>>
    %wp = tt.addptr %ws, %cols : tensor<1024x!tt.ptr<f32>>, tensor<1024xi32>
    %wv = tt.load %wp, %mask : tensor<1024x!tt.ptr<f32>>
    %xw = arith.mulf %xv, %wv : tensor<1024xf32>
    SUM_OF_XW
    %orow = tt.addptr %o, %start : !tt.ptr<f32>, i32
    %os = tt.splat %orow : !tt.ptr<f32> -> tensor<1024x!tt.ptr<f32>>
    %op = tt.addptr %os, %cols : tensor<1024x!tt.ptr<f32>>, tensor<1024xi32>
    tt.store %op, %y, %mask : tensor<1024x!tt.ptr<f32>>
    tt.return
  }
}
"""


@pytest.mark.parametrize("microkernel", ["avx512", "avx2"])
def test_a_row_that_moves_with_the_program_id_is_prefetched_for_the_next_program(tmp_path, microkernel):
    text = converted(prefetching(ROW_AND_WEIGHTS.replace("SUM_OF_XW", SCALED_BY_SUM), microkernel), tmp_path)
    # The row's offset, pid * stride, computed again for pid + 1; one prefetch per 64-byte line of the
    # 4 KiB row, and none for the weights or the stored row.
    filecheck(text, """
CHECK: func.func @k(%[[X:[a-z0-9]+]]: memref<?xf32>
CHECK-SAME: %[[STRIDE:arg3]]: i32
CHECK-SAME: %[[PID:arg5]]: i32
CHECK: %[[ONE:.*]] = arith.constant 1 : i32
CHECK: %[[NEXT:.*]] = arith.addi %[[PID]], %[[ONE]] : i32
CHECK: %[[START:.*]] = arith.muli %[[NEXT]], %[[STRIDE]] : i32
CHECK: %[[OFFSET:.*]] = arith.index_cast %[[START]] : i32 to index
CHECK: %[[STEP:.*]] = arith.constant 16 : index
CHECK: scf.for %[[I:.*]] = %{{.*}} to %{{.*}} step %[[STEP]]
CHECK: %[[AT:.*]] = arith.addi %[[OFFSET]], %[[I]] : index
CHECK: memref.prefetch %[[X]][%[[AT]]], read, locality<3>, data
""")
    assert text.count("memref.prefetch") == 1


def test_an_elementwise_kernel_streams_without_prefetches(tmp_path):
    text = prefetching(ROW_AND_WEIGHTS.replace("SUM_OF_XW", ELEMENTWISE))
    assert "memref.prefetch" not in converted(text, tmp_path)


IN_A_LOOP = """
module MODULE_ATTRIBUTES{
  tt.func public @k(%x: !tt.ptr<f32>, %o: !tt.ptr<f32>, %stride: i32) {
    %pid = tt.get_program_id x : i32
    %start = arith.muli %pid, %stride : i32
    %cols = tt.make_range {end = 64 : i32, start = 0 : i32} : tensor<64xi32>
    %row = tt.addptr %x, %start : !tt.ptr<f32>, i32
    %c0 = arith.constant 0 : i32
    %c4 = arith.constant 4 : i32
    %c1 = arith.constant 1 : i32
    %zero = arith.constant dense<0.0> : tensor<64xf32>
    %sum = scf.for %i = %c0 to %c4 step %c1 iter_args(%acc = %zero) -> (tensor<64xf32>) : i32 {
      %rs = tt.splat %row : !tt.ptr<f32> -> tensor<64x!tt.ptr<f32>>
      %rp = tt.addptr %rs, %cols : tensor<64x!tt.ptr<f32>>, tensor<64xi32>
      %v = tt.load %rp : tensor<64x!tt.ptr<f32>>
      %t = "tt.reduce"(%v) <{axis = 0 : i32}> ({
      ^bb0(%l: f32, %r: f32):
        %m = arith.maxnumf %l, %r : f32
        tt.reduce.return %m : f32
      }) : (tensor<64xf32>) -> f32
      %ts = tt.splat %t : f32 -> tensor<64xf32>
      %a = arith.addf %acc, %ts : tensor<64xf32>
      scf.yield %a : tensor<64xf32>
    }
    %os = tt.splat %o : !tt.ptr<f32> -> tensor<64x!tt.ptr<f32>>
    %op = tt.addptr %os, %cols : tensor<64x!tt.ptr<f32>>, tensor<64xi32>
    tt.store %op, %sum : tensor<64x!tt.ptr<f32>>
    tt.return
  }
}
"""


def test_a_load_inside_a_loop_is_not_prefetched(tmp_path):
    assert "memref.prefetch" not in converted(prefetching(IN_A_LOOP), tmp_path)


@pytest.mark.parametrize("microkernel", ["avx512", "rvv", "portable", None])
def test_a_module_not_marked_for_prefetching_gets_none(tmp_path, microkernel):
    text = with_microkernel(ROW_AND_WEIGHTS.replace("SUM_OF_XW", SCALED_BY_SUM), microkernel)
    assert "memref.prefetch" not in converted(text, tmp_path)


@pytest.mark.parametrize("triple, cpu, prefetches", [
    ("x86_64-unknown-linux-gnu", "sapphirerapids", True), ("x86_64-unknown-linux-gnu", "skylake-avx512", True),
    ("x86_64-unknown-linux-gnu", "alderlake", True), ("x86_64-unknown-linux-gnu", "znver4", False),
    ("x86_64-unknown-linux-gnu", "znver3", False), ("x86_64-unknown-linux-gnu", "x86-64-v4", False),
    ("x86_64-unknown-linux-gnu", "", False), ("riscv64-unknown-linux-gnu", "spacemit-x60", False),
])
def test_which_cores_prefetch_the_next_row(triple, cpu, prefetches):
    from spine.targets import prefetches_next_program
    assert prefetches_next_program(triple, cpu) is prefetches


@pytest.mark.parametrize("cpu, marked", [("sapphirerapids", True), ("znver4", False)])
def test_the_pipeline_marks_the_module_for_intel_cores(tmp_path, cpu, marked):
    from spine.compiler.ttir import record_prefetch
    from tests.to_linalg.test_branches_ttir import parse_ttir
    module = parse_ttir(ROW_AND_WEIGHTS.replace("SUM_OF_XW", SCALED_BY_SUM).replace("MODULE_ATTRIBUTES", ""),
                        tmp_path)
    record_prefetch(module, "x86_64-unknown-linux-gnu", cpu)
    assert ("spine.prefetch_next_program" in str(module)) is marked
