"""The llir stage's passes, each run alone on IR text (compiler/passes.py), as MLIR's own tests run a pass:
what each changes and what it must leave alone. Passes with files of their own (loop_fusion, loop_splitting,
edge_tile_reads, window_reads, number_reductions, products_into_destination, streaming_stores, math) have
their tests there; every pass of both pipelines is named in some test (the last test here checks it)."""
import os
import subprocess
import sys

import pytest

from spine.compiler import codegen
from spine.compiler.lower import LLIR_PIPELINE, LoweringChoices
from spine.compiler.passes import find, run_one
from spine.errors import SpineCompilationError
from tests.to_linalg.test_golden import filecheck

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RISCV = LoweringChoices.for_target("riscv64-unknown-linux-gnu")
X86 = LoweringChoices.for_target("x86_64-unknown-linux-gnu", cpu="x86-64-v3")


def after(name: str, text: str, choices=RISCV) -> str:
    return run_one(text, find(LLIR_PIPELINE, name), choices)


def condition(name: str, text: str, choices=RISCV) -> bool:
    from mlir import ir
    with ir.Context(), ir.Location.unknown():
        return find(LLIR_PIPELINE, name).when(ir.Module.parse(text), choices)


KERNEL = """
func.func @k(%a: memref<?xf32>) {
  return
}
"""


def test_function_attributes_follow_the_target_and_debug():
    filecheck(after("function-attributes", KERNEL), 'CHECK: func.func @k({{.*}}) attributes {passthrough = ["no-builtins"]}')
    debug = LoweringChoices.for_target("x86_64-unknown-linux-gnu", debug=True, cpu="x86-64-v3")
    filecheck(after("function-attributes", KERNEL, debug), 'CHECK: attributes {passthrough = ["noinline"]}')
    assert condition("function-attributes", KERNEL, RISCV)
    assert not condition("function-attributes", KERNEL, X86)   # x86 keeps memcpy calls, inlining, no attributes


SMALL_AND_LARGE_TILES = """
func.func @k(%n: index, %p: i1) {
  %small = memref.alloc() {alignment = 64 : i64} : memref<1024xf32>
  %large = memref.alloc() {alignment = 64 : i64} : memref<1048576xf32>
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  scf.for %i = %c0 to %n step %c1 {
    %inner = memref.alloc() : memref<16xf32>
    "test.use"(%inner) : (memref<16xf32>) -> ()
    scf.if %p {
      %in_loop_branch = memref.alloc() : memref<32xf32>
      "test.use"(%in_loop_branch) : (memref<32xf32>) -> ()
    }
  }
  scf.if %p {
    %branch = memref.alloc() : memref<2048xf16>
    "test.use"(%branch) : (memref<2048xf16>) -> ()
  }
  "test.use"(%small, %large) : (memref<1024xf32>, memref<1048576xf32>) -> ()
  return
}
"""


def test_small_tiles_outside_loops_go_on_the_stack_and_nothing_else_does():
    from mlir import ir
    with ir.Context() as ctx, ir.Location.unknown():
        ctx.allow_unregistered_dialects = True
        module = ir.Module.parse(SMALL_AND_LARGE_TILES)
        find(LLIR_PIPELINE, "small-tiles-on-stack").rewrite(module, RISCV)
        text = str(module)
    filecheck(text, """
CHECK: func.func @k
CHECK-NEXT: memref.alloca() : memref<2048xf16>
CHECK-NEXT: memref.alloca() {alignment = 64 : i64} : memref<1024xf32>
CHECK-NEXT: memref.alloc() {alignment = 64 : i64} : memref<1048576xf32>
CHECK: scf.for
CHECK-NEXT: memref.alloc() : memref<16xf32>
CHECK: scf.if
CHECK-NEXT: memref.alloc() : memref<32xf32>
CHECK: scf.if
CHECK-NOT: memref.alloc
CHECK: "test.use"
""")


def test_memref_copies_become_linalg_copies():
    text = """
func.func @k(%a: memref<?xf32, strided<[?]>>, %b: memref<?xf32>) {
  memref.copy %a, %b : memref<?xf32, strided<[?]>> to memref<?xf32>
  return
}
"""
    filecheck(after("copies-to-linalg", text), """
CHECK-NOT: memref.copy
CHECK: linalg.copy {{.*}}ins(%arg0 : memref<?xf32, strided<[?]>>) outs(%arg1 : memref<?xf32>)
""")


def test_a_boolean_buffer_is_a_byte_buffer_by_the_llvm_dialect():
    text = """
func.func @k(%v: i1) {
  %c0 = arith.constant 0 : index
  %b = memref.alloca() : memref<4xi1>
  memref.store %v, %b[%c0] : memref<4xi1>
  return
}
"""
    filecheck(after("booleans-as-bytes", text), """
CHECK: memref.alloca() : memref<4xi8>
CHECK: arith.extui
""")


ELEMENTWISE_THEN_COPY = """
#id = affine_map<(d0) -> (d0)>
func.func @k(%a: memref<128xf32>, %out: memref<?xf32, strided<[1], offset: ?>>, %n: index) {
  %buf = memref.alloca() : memref<128xf32>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = [ITERATOR]}
      ins(%a : memref<128xf32>) outs(%buf : memref<128xf32>) {
  ^bb0(%x: f32, %y: f32):
    %s = arith.addf %x, %x : f32
    linalg.yield %s : f32
  }
  %w = memref.subview %buf[0] [%n] [1] : memref<128xf32> to memref<?xf32, strided<[1]>>
  linalg.copy ins(%w : memref<?xf32, strided<[1]>>) outs(%out : memref<?xf32, strided<[1], offset: ?>>)
  return
}
"""


def test_a_masked_stores_computation_writes_into_the_destination():
    text = after("stores-in-place", ELEMENTWISE_THEN_COPY.replace("ITERATOR", '"parallel"'))
    filecheck(text, """
CHECK: %[[A:.*]] = memref.subview %arg0[0] [%arg2] [1]
CHECK: linalg.generic {{.*}} ins(%[[A]] : {{.*}}) outs(%arg1 : memref<?xf32, strided<[1], offset: ?>>)
CHECK-NOT: linalg.copy
""")


def test_a_reduction_into_the_tile_keeps_its_copy():
    text = ELEMENTWISE_THEN_COPY.replace("ITERATOR", '"reduction"').replace("(d0) -> (d0)>", "(d0) -> (d0)>")
    assert after("stores-in-place", text).count("linalg.copy") == 1


OVERWRITTEN_INPUT = """
#id = affine_map<(d0) -> (d0)>
func.func @k(%a: memref<128xf32>, %out: memref<?xf32, strided<[1], offset: ?>>, %other: memref<128xf32>,
             %n: index) {
  %t = memref.alloca() : memref<128xf32>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%a : memref<128xf32>) outs(%t : memref<128xf32>) {
  ^bb0(%x: f32, %y: f32):
    %s = arith.addf %x, %x : f32
    linalg.yield %s : f32
  }
  %buf = memref.alloca() : memref<128xf32>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%t : memref<128xf32>) outs(%buf : memref<128xf32>) {
  ^bb0(%x: f32, %y: f32):
    %s = arith.mulf %x, %x : f32
    linalg.yield %s : f32
  }
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%a : memref<128xf32>) outs(WRITTEN : memref<128xf32>) {
  ^bb0(%x: f32, %y: f32):
    linalg.yield %x : f32
  }
  %w = memref.subview %buf[0] [%n] [1] : memref<128xf32> to memref<?xf32, strided<[1]>>
  linalg.copy ins(%w : memref<?xf32, strided<[1]>>) outs(%out : memref<?xf32, strided<[1], offset: ?>>)
  return
}
"""


def test_a_computation_whose_input_is_overwritten_before_the_store_stays():
    """Moved down to the copy, the product would read %t after the op in between overwrote it (FlagGems'
    GELU-and-mul gradient): it keeps its tile and the copy. Writing another buffer, it moves."""
    kept = after("stores-in-place", OVERWRITTEN_INPUT.replace("WRITTEN", "%t"))
    assert kept.count("linalg.copy") == 1
    moved = after("stores-in-place", OVERWRITTEN_INPUT.replace("WRITTEN", "%other"))
    assert moved.count("linalg.copy") == 0


COLUMN_OF_A_TILE = """
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @k(%a: memref<8x64xf32>, %out: memref<8xf32>) {
  %buf = memref.alloca() : memref<8x64xf32>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%a : memref<8x64xf32>) outs(%buf : memref<8x64xf32>) {
  ^bb0(%x: f32, %y: f32):
    %s = arith.addf %x, %x : f32
    linalg.yield %s : f32
  }
  %w = memref.subview %buf[0, 0] [8, 1] [1, 1] : memref<8x64xf32> to memref<8xf32, strided<[64]>>
  linalg.copy ins(%w : memref<8xf32, strided<[64]>>) outs(%out : memref<8xf32>)
  return
}
"""


def test_a_column_copied_out_of_a_tile_keeps_the_tile():
    """A rank-reducing window (a row sum's first column, read as a vector) is not the tile's computation
    over a window: the copy stays."""
    assert after("stores-in-place", COLUMN_OF_A_TILE).count("linalg.copy") == 1


SELECTED_INPUT = """
#id = affine_map<(d0) -> (d0)>
func.func @k(%a: memref<128xf32>, %out: memref<?xf32, strided<[1], offset: ?>>, %first: i1, %n: index) {
  %t1 = memref.alloca() : memref<128xf32>
  %t2 = memref.alloca() : memref<128xf32>
  %buf = memref.alloca() : memref<128xf32>
  %t = arith.select %first, %t1, %t2 : memref<128xf32>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%t : memref<128xf32>) outs(%buf : memref<128xf32>) {
  ^bb0(%x: f32, %y: f32):
    %s = arith.mulf %x, %x : f32
    linalg.yield %s : f32
  }
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%a : memref<128xf32>) outs(WRITTEN : memref<128xf32>) {
  ^bb0(%x: f32, %y: f32):
    linalg.yield %x : f32
  }
  %w = memref.subview %buf[0] [%n] [1] : memref<128xf32> to memref<?xf32, strided<[1]>>
  linalg.copy ins(%w : memref<?xf32, strided<[1]>>) outs(%out : memref<?xf32, strided<[1], offset: ?>>)
  return
}
"""


def test_a_computation_reading_a_selected_buffer_moves_unless_either_is_overwritten():
    """The layer-norm gradient stores its partial sums from whichever tile the first program of a group
    (or a later one) computed: a select of buffers. Moved down to the copy, it would read them later:
    it does when neither is written in between."""
    assert after("stores-in-place", SELECTED_INPUT.replace("WRITTEN", "%a")).count("linalg.copy") == 0
    assert after("stores-in-place", SELECTED_INPUT.replace("WRITTEN", "%t2")).count("linalg.copy") == 1


SHARED_TILE = """
#id = affine_map<(d0) -> (d0)>
func.func @k(%a: memref<128xf32>, %b: memref<128xf32>, %out: memref<?xf32, strided<[1], offset: ?>>,
             %out2: memref<?xf32, strided<[1], offset: ?>>, %n: index) {
  %buf = memref.alloca() : memref<128xf32>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%a : memref<128xf32>) outs(%buf : memref<128xf32>) {
  ^bb0(%x: f32, %y: f32):
    %s = arith.addf %x, %x : f32
    linalg.yield %s : f32
  }
  %w = memref.subview %buf[0] [%n] [1] : memref<128xf32> to memref<?xf32, strided<[1]>>
  linalg.copy ins(%w : memref<?xf32, strided<[1]>>) outs(%out : memref<?xf32, strided<[1], offset: ?>>)
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(SECOND : memref<128xf32>) outs(%buf : memref<128xf32>) {
  ^bb0(%x: f32, %y: f32):
    %s = arith.mulf %x, %x : f32
    linalg.yield %s : f32
  }
  linalg.copy ins(%w : memref<?xf32, strided<[1]>>) outs(%out2 : memref<?xf32, strided<[1], offset: ?>>)
  return
}
"""


def test_tiles_that_share_one_buffer_are_each_computed_into_their_destination():
    """Two tiles of one shape bufferized into one buffer, each copied out through the same window before
    the next is written: both computations write into their destinations. When the second reads the
    buffer (it is not all rewritten first), the first keeps its tile and copy; the second still moves,
    reading the first's tile."""
    filecheck(after("stores-in-place", SHARED_TILE.replace("SECOND", "%b")), """
CHECK: linalg.generic {{.*}} ins(%{{.*}} : memref<?xf32, strided<[1]>>) outs(%arg2 : {{.*}})
CHECK: arith.addf
CHECK: linalg.generic {{.*}} ins(%{{.*}} : memref<?xf32, strided<[1]>>) outs(%arg3 : {{.*}})
CHECK: arith.mulf
CHECK-NOT: linalg.copy
""")
    filecheck(after("stores-in-place", SHARED_TILE.replace("SECOND", "%buf")), """
CHECK: arith.addf
CHECK: linalg.copy {{.*}} outs(%arg2
CHECK: linalg.generic {{.*}} outs(%arg3 : {{.*}})
CHECK: arith.mulf
CHECK-NOT: linalg.copy
""")


TWO_EDGE_TILES = """
func.func @k(%x: memref<?xf16>, %y: memref<?xf16>, %n: index, %o: index) -> (f16, f16) {
  %c0 = arith.constant 0 : index
  %c64 = arith.constant 64 : index
  %zero = arith.constant 0.0 : f16
  %bx = memref.alloca() : memref<64xf16>
  %by = memref.alloca() : memref<64xf16>
  %partial = arith.cmpi ne, %n, %c64 : index
  %t:2 = scf.if %partial -> (memref<64xf16, strided<[1], offset: ?>>, memref<64xf16, strided<[1], offset: ?>>) {
    %cx = memref.cast %bx : memref<64xf16> to memref<64xf16, strided<[1], offset: ?>>
    %rest = arith.subi %c64, %n : index
    %tx = memref.subview %bx[%n] [%rest] [1] : memref<64xf16> to memref<?xf16, strided<[1], offset: ?>>
    linalg.fill ins(%zero : f16) outs(%tx : memref<?xf16, strided<[1], offset: ?>>)
    %wx = memref.reinterpret_cast %x to offset: [%o], sizes: [%n], strides: [1] : memref<?xf16> to memref<?xf16, strided<[1], offset: ?>>
    %hx = memref.subview %bx[0] [%n] [1] : memref<64xf16> to memref<?xf16, strided<[1]>>
    linalg.copy ins(%wx : memref<?xf16, strided<[1], offset: ?>>) outs(%hx : memref<?xf16, strided<[1]>>)
    %cy = memref.cast %by : memref<64xf16> to memref<64xf16, strided<[1], offset: ?>>
    %ty = memref.subview %by[%n] [%rest] [1] : memref<64xf16> to memref<?xf16, strided<[1], offset: ?>>
    linalg.fill ins(%zero : f16) outs(%ty : memref<?xf16, strided<[1], offset: ?>>)
    %wy = memref.reinterpret_cast %y to offset: [%o], sizes: [%n], strides: [1] : memref<?xf16> to memref<?xf16, strided<[1], offset: ?>>
    %hy = memref.subview %by[0] [%n] [1] : memref<64xf16> to memref<?xf16, strided<[1]>>
    linalg.copy ins(%wy : memref<?xf16, strided<[1], offset: ?>>) outs(%hy : memref<?xf16, strided<[1]>>)
    SHARED_WRITE
    scf.yield %cx, %cy : memref<64xf16, strided<[1], offset: ?>>, memref<64xf16, strided<[1], offset: ?>>
  } else {
    %ax = memref.reinterpret_cast %x to offset: [%o], sizes: [64], strides: [1] : memref<?xf16> to memref<64xf16, strided<[1], offset: ?>>
    %ay = memref.reinterpret_cast %y to offset: [%o], sizes: [64], strides: [1] : memref<?xf16> to memref<64xf16, strided<[1], offset: ?>>
    scf.yield %ax, %ay : memref<64xf16, strided<[1], offset: ?>>, memref<64xf16, strided<[1], offset: ?>>
  }
  %vx = memref.load %t#0[%c0] : memref<64xf16, strided<[1], offset: ?>>
  %vy = memref.load %t#1[%c0] : memref<64xf16, strided<[1], offset: ?>>
  return %vx, %vy : f16, f16
}
"""


def test_a_branch_yielding_two_edge_tiles_becomes_two_each_marked():
    """x and dy loaded under one mask: canonicalization combined their branches. Split, each yields its
    own tile (the shared `64 - n` computed before them) and mark-edge-tiles recognises both."""
    text = after("split-tile-branches", TWO_EDGE_TILES.replace("SHARED_WRITE", ""))
    filecheck(text, """
CHECK: arith.subi %c64, %arg2
CHECK: %[[X:.*]] = scf.if %{{.*}} -> (memref<64xf16, strided<[1], offset: ?>>) {
CHECK: memref.reinterpret_cast %arg0 to offset: [%arg3], sizes: [%arg2]
CHECK-NOT: %arg1
CHECK: } else {
CHECK: memref.reinterpret_cast %arg0 to offset: [%arg3], sizes: [64]
CHECK: %[[Y:.*]] = scf.if %{{.*}} -> (memref<64xf16, strided<[1], offset: ?>>) {
CHECK: memref.reinterpret_cast %arg1 to offset: [%arg3], sizes: [%arg2]
CHECK: memref.load %[[X]]
CHECK: memref.load %[[Y]]
""")
    assert text.count("spine.edge_tile") == 0 and after("mark-edge-tiles", text).count("spine.edge_tile") == 2


def test_a_branch_whose_tiles_read_each_other_stays_whole():
    """When one tile of the branch is copied from another (dy's from x's), the two are not independent:
    split, one branch could run before the copy it depends on, so the pass keeps such a branch whole."""
    both = "linalg.copy ins(%hx : memref<?xf16, strided<[1]>>) outs(%hy : memref<?xf16, strided<[1]>>)"
    text = after("split-tile-branches", TWO_EDGE_TILES.replace("SHARED_WRITE", both))
    assert text.count("scf.if") == 1 and "-> (memref<64xf16, strided<[1], offset: ?>>, memref" in text


COMPARE_AND_SWAP = """
func.func private @spine.atomic_cas.i32(memref<?xi32>, index, i32, i32) -> i32
func.func @k(%b: memref<?xi32>, %i: index, %e: i32, %d: i32) -> i32 {
  %old = func.call @spine.atomic_cas.i32(%b, %i, %e, %d) : (memref<?xi32>, index, i32, i32) -> i32
  return %old : i32
}
"""


def test_compare_and_swap_calls_become_atomic_read_modify_writes():
    filecheck(after("expand-compare-and-swap", COMPARE_AND_SWAP), """
CHECK-NOT: spine.atomic_cas
CHECK: memref.generic_atomic_rmw %arg0[%arg1] : memref<?xi32>
CHECK: arith.cmpi eq
CHECK: arith.select
CHECK: memref.atomic_yield
""")


PARALLEL_LOOP = """
func.func @k(%out: memref<?xf32>, %px: i32, %py: i32, %pz: i32, %nx: i32, %ny: i32, %nz: i32) {
  %c0 = arith.constant 0 : i32
  %c4 = arith.constant 4 : i32
  %c1 = arith.constant 1 : i32
  %one = arith.constant 1.0 : f32
  scf.for %s = %c0 to %c4 step %c1 : i32 {
    %i = arith.index_cast %s : i32 to index
    memref.store %one, %out[%i] : memref<?xf32>
  } {smt.parallel_arg0}
  %sum = scf.for %s = %c0 to %c4 step %c1 iter_args(%acc = %one) -> (f32) : i32 {
    %next = arith.addf %acc, %one : f32
    scf.yield %next : f32
  } {smt.parallel_arg0}
  return
}
"""


def test_marked_loops_without_carried_values_become_parallel_loops():
    filecheck(after("smt-parallel-loops", PARALLEL_LOOP), """
CHECK: call @spine_smt_parallel_begin
CHECK: scf.parallel
CHECK: memref.store
CHECK: scf.for {{.*}} iter_args
""")
    assert condition("scf-to-openmp", after("smt-parallel-loops", PARALLEL_LOOP))
    assert not condition("scf-to-openmp", PARALLEL_LOOP)


def test_alloca_scopes_become_stack_saves_and_restores():
    text = """
func.func @k() {
  memref.alloca_scope {
    %t = memref.alloca() : memref<4xf32>
    "test.use"(%t) : (memref<4xf32>) -> ()
  }
  return
}
"""
    from mlir import ir
    with ir.Context() as ctx, ir.Location.unknown():
        ctx.allow_unregistered_dialects = True
        module = ir.Module.parse(text)
        step = find(LLIR_PIPELINE, "inline-alloca-scopes")
        assert step.when(module, RISCV)
        step.rewrite(module, RISCV)
        result = str(module)
    filecheck(result, """
CHECK: llvm.intr.stacksave
CHECK-NEXT: memref.alloca
CHECK-NEXT: "test.use"
CHECK-NEXT: llvm.intr.stackrestore
CHECK-NOT: alloca_scope
""")


@pytest.mark.parametrize("ty,emulated", [("bf16", True), ("memref<4xbf16>", True), ("vector<8xbf16>", True),
                                         ("f32", False), ("memref<4xf16>", False)])
def test_bf16_emulation_runs_for_bf16_values_only(ty, emulated):
    """Decided by the values' types, not by the text: a kernel in a file named test_bf16.py has no bf16."""
    text = f"""
func.func @k(%a: {ty}) {{
  return
}}
"""
    assert condition("bf16-as-integers", text) == emulated


def test_the_llvm_dialect_lowering_takes_openmp_only_with_openmp():
    plain = after("to-llvm-dialect", KERNEL)
    filecheck(plain, "CHECK: llvm.func @k")


# ----------------------------------------------------------------------------------------- LLVM passes

def _llvm_pass(name: str, text: str, entry_ir: str = "", bf16: bool = False):
    """(the module after LLVM_PIPELINE's pass `name`, whether its condition held)."""
    llvm = codegen._llvm()
    tm = codegen._target_machine("riscv64-unknown-linux-gnu", "generic-rv64", "+64bit,+m,+a,+f,+d,+c,+v")
    module = llvm.parse_assembly(text)
    module.triple = "riscv64-unknown-linux-gnu"
    module.data_layout = str(tm.target_data)
    holder = codegen.LlvmModule(module)
    context = codegen.LlvmContext(entry_ir, "riscv64-unknown-linux-gnu", tm, llvm.create_pass_builder(
        tm, llvm.create_pipeline_tuning_options(speed_level=3)), bf16=bf16)
    step = next(p for p in codegen.LLVM_PIPELINE if p.name == name)
    held = step.when(holder, context)
    step.rewrite(holder, context)
    holder.ref.verify()
    return str(holder.ref), held


def test_openmp_runtime_calls_bind_to_spines_runtime():
    text, held = _llvm_pass("rename-runtime-calls", """
declare void @__kmpc_fork_call(ptr, i32, ptr, ...)
define void @k() {
  call void (ptr, i32, ptr, ...) @__kmpc_fork_call(ptr null, i32 0, ptr null)
  ret void
}
""")
    assert held
    filecheck(text, """
CHECK-NOT: __kmpc_
CHECK: call void (ptr, i32, ptr, ...) @spine_kmpc_fork_call(
""")
    assert not _llvm_pass("rename-runtime-calls", "define void @k() {\n  ret void\n}\n")[1]


BFLOAT_KERNEL = """
define bfloat @k(float %x) {
  %h = fptrunc float %x to bfloat
  ret bfloat %h
}
"""


def test_a_module_with_bfloat_gets_its_own_truncation():
    text, held = _llvm_pass("define-bf16-truncation", BFLOAT_KERNEL, bf16=True)
    assert held
    filecheck(text, """
CHECK: @llvm.compiler.used = appending global [1 x ptr] [ptr @__truncsfbf2]
CHECK: define weak hidden bfloat @__truncsfbf2(float %x)
""")


def test_a_module_without_bfloat_or_with_its_own_truncation_is_left_alone():
    assert not _llvm_pass("define-bf16-truncation", "define float @k(float %x) {\n  ret float %x\n}\n")[1]
    own = BFLOAT_KERNEL + "define bfloat @__truncsfbf2(float %x) {\n  %h = fptrunc float %x to bfloat\n  ret bfloat %h\n}\n"
    assert not _llvm_pass("define-bf16-truncation", own, bf16=True)[1]


def test_the_entry_point_is_linked_in_and_everything_else_made_internal():
    from spine.compiler.entry import entry_module_ir
    kernel = """
define void @div(ptr %0, ptr %1, i64 %2, i64 %3, i64 %4, i32 %5, i32 %6, i32 %7, i32 %8, i32 %9, i32 %10) {
  ret void
}
"""
    entry = entry_module_ir("div", ["ptr"], [], "riscv64-unknown-linux-gnu")
    text, _ = _llvm_pass("link-entry", kernel, entry)
    filecheck(text, """
CHECK: define internal void @div(
CHECK: define void @spine_entry(ptr %{{.*}}, i32
CHECK: call void @div(
""")


# ----------------------------------------------------------------------------------- the command line

def test_the_pass_list_names_every_pass_in_order():
    proc = subprocess.run([sys.executable, "-m", "spine.compiler.lower", "list"], capture_output=True, text=True,
                          cwd=ROOT, check=True)
    names = [line.split(":")[0].split(" ", 1)[1] for line in proc.stdout.splitlines() if line[:2].isdigit()]
    assert names == [p.name for p in LLIR_PIPELINE]


def test_one_pass_runs_alone_on_a_file(tmp_path):
    source = tmp_path / "in.mlir"
    source.write_text(COMPARE_AND_SWAP)
    proc = subprocess.run([sys.executable, "-m", "spine.compiler.lower", "run", "expand-compare-and-swap",
                           str(source)], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "memref.generic_atomic_rmw" in proc.stdout and "spine.atomic_cas" not in proc.stdout
    bad = subprocess.run([sys.executable, "-m", "spine.compiler.lower", "run", "no-such-pass", str(source)],
                         capture_output=True, text=True, cwd=ROOT)
    assert bad.returncode == 2 and "invalid choice" in bad.stderr


def test_a_compile_dumps_the_module_after_every_pass(target, fresh_cache, monkeypatch, tmp_path):
    import torch
    from tests.kernels import add_kernel
    monkeypatch.setenv("SPINE_DUMP_PASSES", str(tmp_path / "passes"))
    x = torch.rand(100)
    out = torch.empty(100)
    add_kernel[(1,)](x, x, out, 100, BLOCK=128)
    torch.testing.assert_close(out, 2 * x)
    dumps = sorted(os.listdir(tmp_path / "passes"))
    listing = (tmp_path / "passes" / "add_kernel.passes.txt").read_text()
    for step in LLIR_PIPELINE + codegen.LLVM_PIPELINE:
        assert f" {step.name}: " in listing, step.name
    assert "add_kernel.03-bufferize.mlir" in dumps and "add_kernel.llvm.input.ll" in dumps
    assert any(name.endswith("-o3.ll") for name in dumps)
    # a pass that changed nothing writes nothing
    unchanged = [line.split()[1].rstrip(":") for line in listing.splitlines() if line.endswith(": unchanged")]
    assert unchanged and not any(f"-{name}." in " ".join(dumps) for name in unchanged)


def test_every_pass_has_tests():
    """Each pass of both pipelines is named in a test of tests/compiler, tests/ops or tests/to_linalg."""
    texts = []
    for folder in ("compiler", "ops", "to_linalg"):
        for name in os.listdir(os.path.join(ROOT, "tests", folder)):
            if name.endswith(".py"):
                with open(os.path.join(ROOT, "tests", folder, name)) as f:
                    texts.append(f.read())
    corpus = "\n".join(texts)
    modules = {"mark-edge-tiles": "edge_tile_reads", "read-edge-tiles-in-place": "edge_tile_reads",
               "fuse-adjacent-loops": "loop_fusion", "reduce-without-nans": "number_reductions",
               "split-loops-at-bounds": "loop_splitting", "read-windows-in-place": "window_reads",
               "written-edge-tiles": "written_tiles", "update-carried-tiles-in-place": "carried_tiles",
               "products-into-destination": "products_into_destination", "expand-math": "math_expansion",
               "carried-products-into-destination": "carried_products", "drop-unread-stores": "unread_stores",
               "share-packed-panels": "compiler.shared_panels",
               "bufferize": "BUFFERIZE", "fuse-elementwise": "FUSE_ELEMENTWISE", "streaming-stores": "streaming-stores", "o3": "optimize_and_emit"}
    untested = [p.name for p in LLIR_PIPELINE + codegen.LLVM_PIPELINE
                if f'"{p.name}"' not in corpus and modules.get(p.name, "\0") not in corpus]
    assert untested == []


def test_upstream_passes_buffers_hoisted_deallocated_loops_formed():
    loop_alloc = """
func.func @k(%n: index, %a: memref<4xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  scf.for %i = %c0 to %n step %c1 {
    %t = memref.alloc() : memref<4xf32>
    memref.copy %a, %t : memref<4xf32> to memref<4xf32>
    memref.dealloc %t : memref<4xf32>
  }
  return
}
"""
    filecheck(after("hoist-buffers", loop_alloc), """
CHECK: memref.alloc() : memref<4xf32>
CHECK: scf.for
""")
    heap = """
func.func @k(%a: memref<4xf32>) {
  %t = memref.alloc() : memref<4xf32>
  memref.copy %a, %t : memref<4xf32> to memref<4xf32>
  memref.copy %t, %a : memref<4xf32> to memref<4xf32>
  return
}
"""
    filecheck(after("deallocate", heap), "CHECK: memref.dealloc")
    generic = """
#id = affine_map<(d0) -> (d0)>
func.func @k(%a: memref<8xf32>) {
  linalg.generic {indexing_maps = [#id], iterator_types = ["parallel"]} outs(%a : memref<8xf32>) {
  ^bb0(%x: f32):
    %s = arith.addf %x, %x : f32
    linalg.yield %s : f32
  }
  return
}
"""
    filecheck(after("to-loops", generic), """
CHECK: scf.for
CHECK-NOT: linalg.generic
""")


def test_line_tables_only_for_debug_compiles():
    from mlir import ir
    located = """
func.func @k(%a: memref<?xf32>) {
  return loc("k.py":2:3)
} loc("k.py":1:1)
"""
    debug = LoweringChoices.for_target("riscv64-unknown-linux-gnu", debug=True)
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(located)
        find(LLIR_PIPELINE, "to-llvm-dialect").rewrite(module, debug)
        step = find(LLIR_PIPELINE, "line-tables")
        assert step.when(module, debug) and not step.when(module, RISCV)
        step.rewrite(module, debug)
        text = module.operation.get_asm(enable_debug_info=True)
    filecheck(text, """
CHECK: #llvm.di_compile_unit<{{.*}}emissionKind = LineTablesOnly>
CHECK: #llvm.di_subprogram<{{.*}}name = "k"{{.*}}line = 1
""")


def test_a_rewrite_that_returns_a_value_of_its_own_still_counts_as_run():
    """Only a string is what a pass says when it gives up (smt-parallel-loops' rewrite returns whether it
    found loops)."""
    from spine.compiler.lower import _on_module
    from spine.compiler.passes import Pass, run_pipeline
    steps = (Pass("returns-true", "", _on_module(lambda module: True)),
             Pass("gives-up", "", _on_module(lambda module: "gave up: no reason")))
    record = run_pipeline(object(), steps, None)
    assert record.outcomes == [("returns-true", "ran"), ("gives-up", "gave up: no reason")]
    assert record.gave_up() == [("gives-up", "gave up: no reason")]
