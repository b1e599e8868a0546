"""Streaming stores (compiler/streaming_stores.py): the MLIR pass run alone on IR text, what it rewrites
and what it leaves alone (and says so); the bytes each program stores, from TTIR text; the entry point's
flag; and kernels that stream, on the host, checked against torch with outputs at every alignment the
streaming loop tells apart."""
import platform
import re

import pytest
import torch
import triton
import triton.language as tl

from spine.kernel_facts import KernelFacts

from spine.compiler.lower import LLIR_PIPELINE, LoweringChoices
from spine.compiler.passes import find, run_one
from spine.compiler.streaming_stores import stream_stores, streaming_programs
from spine.ir_names import streaming_flag_symbol
from tests.to_linalg.test_branches_ttir import parse_ttir
from tests.to_linalg.test_golden import filecheck

X86 = LoweringChoices.for_target("x86_64-unknown-linux-gnu", cpu="x86-64-v4", streaming_stores=True)

# A vector add's loop as the conversion leaves it: loads and a store through views of the arguments,
# indexed by the loop.
ADD = """
func.func @k(%a: memref<?xf32>, %b: memref<?xf32>, %out: memref<?xf32>, %n: index, %start: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %o = memref.reinterpret_cast %out to offset: [%start], sizes: [%n], strides: [1] : memref<?xf32> to memref<?xf32, strided<[1], offset: ?>>
  %x = memref.reinterpret_cast %a to offset: [%start], sizes: [%n], strides: [1] : memref<?xf32> to memref<?xf32, strided<[1], offset: ?>>
  scf.for %i = %c0 to %n step %c1 {
    %v = memref.load %x[%i] : memref<?xf32, strided<[1], offset: ?>>
    %w = memref.load %b[%i] : memref<?xf32>
    %s = arith.addf %v, %w fastmath<contract> : f32
    memref.store %s, %o[%i] : memref<?xf32, strided<[1], offset: ?>>
  }
  return
}
"""


def streamed(text: str) -> str:
    return run_one(text, find(LLIR_PIPELINE, "streaming-stores"), X86)


def outcome(text: str):
    """What the pass said of `text` (None: nothing it gave up on), and the module after it."""
    from mlir import ir
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        note = stream_stores(module)
        module.operation.verify()
        return note, str(module)


def test_a_store_loop_gets_a_line_aligned_streaming_version_before_it():
    filecheck(streamed(ADD), f"""
CHECK: llvm.mlir.global external @{streaming_flag_symbol("k")}() {{{{.*}}}} : i8
CHECK: %[[BASE:.+]] = memref.extract_aligned_pointer_as_index %[[OUT:[^ ]+]]
CHECK: arith.remui %{{{{.+}}}}, %c64
CHECK: %[[ALIGNED:.+]] = arith.minsi %{{{{.+}}}}, %arg3 : index
CHECK: llvm.mlir.addressof @{streaming_flag_symbol("k")}
CHECK: %[[START:.+]] = scf.if %{{{{.+}}}} -> (index) {{
CHECK-NEXT: scf.for %{{{{.+}}}} = %c0 to %[[ALIGNED]] step %c1 {{
CHECK: memref.store
CHECK: %[[END:.+]] = arith.addi %[[ALIGNED]], %{{{{.+}}}} : index
CHECK: scf.for %[[I:.+]] = %[[ALIGNED]] to %[[END]] step %c16 {{
CHECK-NEXT: vector.load %{{{{.+}}}}[%[[I]]] : memref<?xf32, strided<[1], offset: ?>>, vector<16xf32>
CHECK-NEXT: vector.load %arg1[%[[I]]] : memref<?xf32>, vector<16xf32>
CHECK-NEXT: arith.addf %{{{{.+}}}}, %{{{{.+}}}} fastmath<contract> : vector<16xf32>
CHECK-NEXT: vector.store %{{{{.+}}}}, %[[OUT]][%[[I]]] {{alignment = 64 : i64, nontemporal = true}}
CHECK: scf.yield %[[END]] : index
CHECK-NEXT: }} else {{
CHECK-NEXT: scf.yield %c0 : index
CHECK: scf.for %{{{{.+}}}} = %[[START]] to %arg3 step %c1 {{
CHECK-NEXT: memref.load
CHECK-NEXT: memref.load
CHECK-NEXT: arith.addf %{{{{.+}}}}, %{{{{.+}}}} fastmath<contract> : f32
CHECK-NEXT: memref.store
""")


def test_values_the_same_in_every_iteration_are_broadcast_and_constant_branches_taken():
    text = """
func.func @k(%in: memref<2x64xf32>, %out: memref<2x64xf16>, %scale: memref<f32>, %row: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %true = arith.constant true
  scf.for %i = %c0 to %c64 step %c1 {
    %v = scf.if %true -> (f32) {
      %l = memref.load %in[%row, %i] : memref<2x64xf32>
      scf.yield %l : f32
    } else {
      %z = arith.constant 0.0 : f32
      scf.yield %z : f32
    }
    %s = memref.load %scale[] : memref<f32>
    %two = arith.constant 2.0 : f32
    %m = arith.mulf %v, %s : f32
    %p = arith.addf %m, %two : f32
    %h = arith.truncf %p : f32 to f16
    memref.store %h, %out[%row, %i] : memref<2x64xf16>
  }
  return
}
"""
    filecheck(streamed(text), """
CHECK: scf.for %[[I:.+]] = %{{.+}} to %{{.+}} step %c32 {
CHECK-NEXT: %[[V:.+]] = vector.load %arg0[%arg3, %[[I]]] : memref<2x64xf32>, vector<32xf32>
CHECK-NEXT: %[[S:.+]] = memref.load %arg2[] : memref<f32>
CHECK-NEXT: %[[TWO:.+]] = arith.constant 2.0
CHECK-NEXT: %[[SV:.+]] = vector.broadcast %[[S]] : f32 to vector<32xf32>
CHECK-NEXT: %[[M:.+]] = arith.mulf %[[V]], %[[SV]] : vector<32xf32>
CHECK-NEXT: %[[TV:.+]] = vector.broadcast %[[TWO]] : f32 to vector<32xf32>
CHECK-NEXT: arith.addf %[[M]], %[[TV]] : vector<32xf32>
CHECK-NEXT: arith.truncf %{{.+}} : vector<32xf32> to vector<32xf16>
CHECK-NEXT: vector.store %{{.+}}, %arg1[%arg3, %[[I]]] {alignment = 64 : i64, nontemporal = true}
CHECK-NOT: scf.if %true
CHECK: scf.yield
""")


def test_stores_of_different_widths_share_the_lanes_and_each_must_be_aligned():
    """Lanes from the widest store (16 floats a line): the f16 store writes 32 bytes, aligned to 32 only
    where both outputs are, which the condition checks at the aligned start."""
    text = """
func.func @k(%in: memref<?xf32>, %a: memref<?xf32>, %b: memref<?xf16>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  scf.for %i = %c0 to %n step %c1 {
    %v = memref.load %in[%i] : memref<?xf32>
    %h = arith.truncf %v : f32 to f16
    memref.store %h, %b[%i] : memref<?xf16>
    memref.store %v, %a[%i] : memref<?xf32>
  }
  return
}
"""
    filecheck(streamed(text), """
CHECK: %[[ALIGNED:.+]] = arith.minsi
CHECK: memref.extract_aligned_pointer_as_index %arg2
CHECK: arith.remui %{{.+}}, %c32
CHECK: scf.for %{{.+}} = %[[ALIGNED]] to %{{.+}} step %c16 {
CHECK: vector.store %{{.+}}, %arg2[%{{.+}}] {alignment = 32 : i64, nontemporal = true} : memref<?xf16>, vector<16xf16>
CHECK-NEXT: vector.store %{{.+}}, %arg1[%{{.+}}] {alignment = 64 : i64, nontemporal = true} : memref<?xf32>, vector<16xf32>
""")


def _loop(body: str, memrefs: str = "%in: memref<?xf32>, %out: memref<?xf32>", carried: str = "") -> str:
    return f"""
func.func @k({memrefs}, %n: index) {{
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %buffer = memref.alloca() : memref<64xf32>
  {carried}scf.for %i = %c0 to %n step %c1 {{
{body}
  }}
  return
}}
"""


@pytest.mark.parametrize("body,reason", [
    ("    %j = arith.muli %i, %c1 : index\n    %v = memref.load %in[%j] : memref<?xf32>\n"
     "    memref.store %v, %out[%j] : memref<?xf32>", "arith.muli computes with the loop index"),
    ("    %v = memref.load %in[%i] : memref<?xf32>\n    memref.store %v, %out[%i] : memref<?xf32>\n"
     "    memref.store %v, %buffer[%i] : memref<64xf32>", "stores into a buffer of its own"),
    ("    %v = memref.load %in[%i] : memref<?xf32>\n    memref.store %v, %out[%c0] : memref<?xf32>",
     "a store whose last index is not the loop index"),
    ("    %v = memref.load %out[%c0] : memref<?xf32>\n    memref.store %v, %out[%i] : memref<?xf32>",
     "a load of memory the loop stores into, elsewhere than it stores"),
    ("    %v = memref.load %in[%i] : memref<?xf32>\n    func.call @f(%v) : (f32) -> ()\n"
     "    memref.store %v, %out[%i] : memref<?xf32>", "a loop with func.call"),
])
def test_a_store_loop_that_cannot_stream_is_left_alone_and_reported(body, reason):
    text = _loop(body) + "func.func private @f(f32)\n"
    note, module = outcome(text)
    assert note.startswith("gave up on 1 of 1 loops storing into arguments") and reason in note, note
    assert "vector." not in module and "llvm.mlir.global" not in module


def test_stores_into_an_argument_the_kernel_reads_elsewhere_stay_in_the_cache():
    """Partial sums accumulated in place: a loop reads the argument into a tile, another stores the new
    sums back. Streamed, the next program to add to them would read them from memory."""
    text = """
func.func @k(%in: memref<?xf32>, %sums: memref<?xf32>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %tile = memref.alloca() : memref<64xf32>
  scf.for %i = %c0 to %n step %c1 {
    %v = memref.load %sums[%i] : memref<?xf32>
    memref.store %v, %tile[%i] : memref<64xf32>
  }
  scf.for %i = %c0 to %n step %c1 {
    %a = memref.load %in[%i] : memref<?xf32>
    %b = memref.load %tile[%i] : memref<64xf32>
    %s = arith.addf %a, %b : f32
    memref.store %s, %sums[%i] : memref<?xf32>
  }
  return
}
"""
    note, module = outcome(text)
    assert note is not None and "an argument the kernel also reads" in note, note
    assert "nontemporal" not in module
    assert "nontemporal" in outcome(text.replace("memref.load %sums[%i]", "memref.load %in[%i]"))[1]


def test_loops_with_carried_values_strides_and_bits_are_reported():
    carried = _loop("    %v = memref.load %in[%i] : memref<?xf32>\n    memref.store %v, %out[%i] : memref<?xf32>\n"
                    "    %t = arith.addf %acc, %v : f32\n    scf.yield %t : f32",
                    carried="%zero = arith.constant 0.0 : f32\n  %sum = ").replace(
        "step %c1 {", "step %c1 iter_args(%acc = %zero) -> (f32) {")
    strided = _loop("    %v = memref.load %in[%i] : memref<?xf32>\n"
                    "    memref.store %v, %out[%i] : memref<?xf32, strided<[?]>>",
                    "%in: memref<?xf32>, %out: memref<?xf32, strided<[?]>>")
    bits = _loop("    %v = memref.load %in[%i] : memref<?xi1>\n    memref.store %v, %out[%i] : memref<?xi1>",
                 "%in: memref<?xi1>, %out: memref<?xi1>")
    for text, reason in ((carried, "loop-carried values"), (strided, "not contiguous"), (bits, "i1 values")):
        note, module = outcome(text)
        assert note is not None and reason in note, (reason, note)
        assert "vector." not in module


def test_loops_storing_only_into_the_kernels_own_buffers_are_not_candidates():
    note, module = outcome(_loop("    %v = memref.load %in[%i] : memref<?xf32>\n"
                                 "    memref.store %v, %buffer[%i] : memref<64xf32>"))
    assert note is None and "vector." not in module


def test_private_functions_are_not_kernels():
    note, module = outcome(ADD.replace("func.func @k", "func.func private @k"))
    assert note is None and "vector." not in module


def test_atomics_of_a_streaming_function_are_fenced_first():
    """Through an atomic one program may hand another what it stored, within the launch."""
    atomic = ("    %old = memref.atomic_rmw addf %s, %o[%i] : (f32, memref<?xf32, strided<[1], offset: ?>>) -> f32\n"
              "  }\n  %c2 = arith.constant 2 : index\n"
              "  %once = memref.atomic_rmw addf %c, %b[%c2] : (f32, memref<?xf32>) -> f32\n  return")
    text = ADD.replace("  }\n  return", atomic).replace("%c1 = arith.constant 1 : index",
                                                        "%c1 = arith.constant 1 : index\n  %c = arith.constant 1.0 : f32")
    note, module = outcome(text)
    # The function's one loop has the atomic in it and does not stream: nothing to fence.
    assert "gave up" in note and "llvm.x86.sse.sfence" not in module
    both = text.replace("func.func @k(", "func.func @j(") + ADD.replace(
        "  return", "  %c5 = arith.constant 5 : index\n  %f = arith.constant 1.0 : f32\n"
                    "  %old = memref.atomic_rmw addf %f, %b[%c5] : (f32, memref<?xf32>) -> f32\n  return")
    note, module = outcome(both)
    fenced = module[module.index("func.func @k("):]
    filecheck(fenced, """
CHECK: vector.store
CHECK: llvm.call_intrinsic "llvm.x86.sse.sfence"() : () -> ()
CHECK-NEXT: memref.atomic_rmw
""")
    assert module[:module.index("func.func @k(")].count("sfence") == 0


def test_the_pass_runs_only_for_streaming_x86_kernels():
    from mlir import ir
    step = find(LLIR_PIPELINE, "streaming-stores")
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(ADD)
        assert step.when(module, X86)
        assert not step.when(module, LoweringChoices.for_target("x86_64-unknown-linux-gnu", cpu="x86-64-v4"))
        assert not step.when(module, LoweringChoices.for_target("riscv64-unknown-linux-gnu",
                                                                streaming_stores=True))


def test_the_streaming_loop_compiles_to_non_temporal_line_stores():
    """Through the rest of the lowering and LLVM: whole zmm lines on AVX-512, ymm halves with AVX2."""
    from spine.compiler.codegen import optimize_and_emit
    from spine.compiler.entry import entry_module_ir
    from spine.compiler.lower import lower
    for cpu, register in (("x86-64-v4", "zmm"), ("x86-64-v3", "ymm")):
        choices = LoweringChoices.for_target("x86_64-unknown-linux-gnu", cpu=cpu, streaming_stores=True)
        llvm_ir = lower(ADD, choices)
        entry = entry_module_ir("k", ["ptr", "ptr", "ptr", "i64", "i64"], [], "x86_64-unknown-linux-gnu",
                                streaming_programs=4)
        _, assembly = optimize_and_emit(llvm_ir, entry, "x86_64-unknown-linux-gnu", cpu, "", want_assembly=True)
        assert re.search(rf"vmovntps\s+%{register}", assembly), cpu


def test_programs_from_which_a_launch_streams():
    assert streaming_programs(4096, 16 << 20) == 4096
    assert streaming_programs(4000, 16 << 20) == 4195        # rounded up
    assert streaming_programs(0, 16 << 20) == 0              # nothing known to be stored
    assert streaming_programs(4096, 0) == 0                  # switched off


def test_the_entry_point_sets_the_flag_only_when_it_changes():
    from spine.compiler.entry import entry_module_ir
    plain = entry_module_ir("k", ["ptr", "i32"], [], "x86_64-unknown-linux-gnu")
    assert "spine_streaming_stores" not in plain
    flagged = entry_module_ir("k", ["ptr", "i32"], [], "x86_64-unknown-linux-gnu", streaming_programs=4195)
    assert f'@"{streaming_flag_symbol("k")}" = hidden global i8 0' in flagged
    assert "icmp uge i64" in flagged and "4195" in flagged
    assert re.search(r"icmp ne i8", flagged)


LOOPED_STORES = """
module {
  tt.func public @k(%p: !tt.ptr<f32>, %q: !tt.ptr<f16>, %n: i32) {
    %c0 = arith.constant 0 : i32
    %c1 = arith.constant 1 : i32
    %c4 = arith.constant 4 : i32
    %r = tt.make_range {end = 64 : i32, start = 0 : i32} : tensor<64xi32>
    %s = tt.splat %p : !tt.ptr<f32> -> tensor<64x!tt.ptr<f32>>
    %ptrs = tt.addptr %s, %r : tensor<64x!tt.ptr<f32>>, tensor<64xi32>
    %x = tt.load %ptrs : tensor<64x!tt.ptr<f32>>
    scf.for %i = %c0 to %c4 step %c1 : i32 {
      tt.store %ptrs, %x : tensor<64x!tt.ptr<f32>>
    }
    %qs = tt.splat %q : !tt.ptr<f16> -> tensor<64x!tt.ptr<f16>>
    %qptrs = tt.addptr %qs, %r : tensor<64x!tt.ptr<f16>>, tensor<64xi32>
    %h = arith.truncf %x : tensor<64xf32> to tensor<64xf16>
    scf.for %i = %c0 to %n step %c1 : i32 {
      tt.store %qptrs, %h : tensor<64x!tt.ptr<f16>>
    }
    tt.return
  }
}
"""


def test_bytes_stored_per_program_count_constant_loops_and_runtime_loops_once(tmp_path):
    from spine.compiler.export import export_generic
    from spine.to_linalg import convert_ttir
    kernel = convert_ttir(export_generic(parse_ttir(LOOPED_STORES, tmp_path)))
    assert kernel.stored_bytes_per_program == 4 * 64 * 4 + 64 * 2


# ------------------------------------------------------------------------------------------ at run time

@pytest.fixture
def streaming_host(monkeypatch, tmp_path):
    """The host target, streaming from 1 MiB; the assembly dumped to check that it streams."""
    import triton
    from spine.driver import CPUDriver
    monkeypatch.setenv("SPINE_STREAMING_STORES_MB", "1")
    monkeypatch.setenv("SPINE_TRITON_DUMP_PATH", str(tmp_path))
    triton.runtime.driver.set_active(CPUDriver(target="host"))
    return tmp_path


def _assembly(dump, name: str) -> str:
    return (dump / f"{name}.s").read_text()


@pytest.mark.parametrize("offset", [0, 8, 4, 1])   # 64-, 32-, 16-byte aligned, unaligned
def test_a_large_vector_add_streams_at_any_alignment(streaming_host, offset):
    from tests.kernels import add_kernel
    n = (1 << 19) + 37                               # 2 MiB written, the last block partial
    x, y = torch.rand(n), torch.rand(n)
    storage = torch.full((n + offset,), float("nan"))
    out = storage[offset:]
    add_kernel[(-(-n // 1024),)](x, y, out, n, BLOCK=1024)
    torch.testing.assert_close(out, x + y, rtol=0, atol=0)
    assert torch.isnan(storage[:offset]).all()
    if platform.machine() == "x86_64":
        assert re.search(r"vmovntps|movntps", _assembly(streaming_host, "add_kernel"))


@pytest.mark.parametrize("cols", [1000, 999, 64])
def test_a_large_row_softmax_streams(streaming_host, cols):
    from tests.kernels import softmax_kernel
    rows = (2 << 20) // (4 * cols) + 3
    a = torch.randn(rows, cols)
    b = torch.empty_like(a)
    compiled = softmax_kernel[(rows,)](b, a, a.stride(0), b.stride(0), cols, BLOCK=1024)
    torch.testing.assert_close(b, torch.softmax(a, dim=1))
    if platform.machine() == "x86_64":
        assert re.search(r"vmovntps|movntps", _assembly(streaming_host, "softmax_kernel"))
        assert KernelFacts.from_metadata(compiled.metadata).gave_up == ()


def test_a_small_launch_of_a_streaming_kernel_stays_correct(streaming_host):
    """The same compiled kernel, first under the program count (the flag stays clear), then over it, then
    under it again: each launch sets the flag for itself."""
    from tests.kernels import add_kernel
    for n in (1000, (1 << 19) + 5, 3000):
        x, y, out = torch.rand(n), torch.rand(n), torch.empty(n)
        add_kernel[(-(-n // 1024),)](x, y, out, n, BLOCK=1024)
        torch.testing.assert_close(out, x + y, rtol=0, atol=0)


@triton.jit
def _index_values_kernel(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, offs.to(tl.float32) * 0.5, mask=offs < n)


def test_a_kernel_whose_store_loop_cannot_stream_says_so_in_its_facts_and_dumps(monkeypatch, tmp_path):
    """A store of values computed from the loop index: the outcome reaches the compiled kernel
    (KernelFacts.gave_up) and SPINE_DUMP_PASSES' pass list, and the kernel is still right."""
    from spine.driver import CPUDriver
    if platform.machine() != "x86_64":
        pytest.skip("streaming stores are x86's")
    monkeypatch.setenv("SPINE_STREAMING_STORES_MB", "1")
    monkeypatch.setenv("SPINE_DUMP_PASSES", str(tmp_path))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "cache"))
    triton.runtime.driver.set_active(CPUDriver(target="host"))
    out = torch.empty(4000)
    compiled = _index_values_kernel[(4,)](out, 4000, BLOCK=1024)
    torch.testing.assert_close(out, torch.arange(4000, dtype=torch.float32) * 0.5)
    gave_up = KernelFacts.from_metadata(compiled.metadata).gave_up
    assert [name for name, _ in gave_up] == ["streaming-stores"]
    assert "computes with the loop index" in gave_up[0][1]
    assert "streaming-stores: gave up" in (tmp_path / "_index_values_kernel.passes.txt").read_text()
