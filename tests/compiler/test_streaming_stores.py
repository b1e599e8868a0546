"""Streaming stores (compiler/streaming_stores.py): which stores the rewrite takes, from LLVM IR text; the
bytes each program stores, from TTIR text; the entry point's flag; and kernels that stream, on the host,
checked against torch with outputs at every alignment the rewrite tells apart."""
import platform
import re

import pytest
import torch

from spine.kernel_facts import KernelFacts

from spine.compiler.streaming_stores import streaming_programs, with_streaming_stores
from spine.ir_names import streaming_flag_symbol
from tests.to_linalg.test_branches_ttir import parse_ttir

FLAG = streaming_flag_symbol("kernel")

# An O3-optimised module as the code generator sees it: the entry point loads each argument's data pointer
# through args[i] (entry.py), one kernel function stays out of line.
MODULE = f"""
@"{FLAG}" = hidden global i8 0

define internal void @kernel(ptr %out, ptr %scratch, ptr %input) {{
  store <16 x float> zeroinitializer, ptr %out, align 4
  store <16 x float> zeroinitializer, ptr %scratch, align 4
  store <16 x float> zeroinitializer, ptr %input, align 4
  ret void
}}

define void @spine_entry(ptr %.1, i32 %.2, i32 %.3, i32 %.4, i32 %.5, i32 %.6, i32 %.7) {{
entry:
  %.10 = load ptr, ptr %.1, align 8
  %.18 = load ptr, ptr %.10, align 8
  %.11 = getelementptr i8, ptr %.1, i64 8
  %.12 = load ptr, ptr %.11, align 8
  %.19 = load ptr, ptr %.12, align 8
  %buffer = alloca [64 x float], align 64
  br label %loop
loop:
  %row = phi ptr [ %.19, %entry ], [ %next, %loop ]
  store <16 x float> splat (float 1.000000e+00), ptr %row, align 4
  store <8 x float> zeroinitializer, ptr %row, align 4
  store <2 x float> zeroinitializer, ptr %row, align 4
  store float 0.000000e+00, ptr %row, align 4
  store <16 x float> zeroinitializer, ptr %buffer, align 64
  %next = getelementptr float, ptr %row, i64 1000
  %done = icmp eq ptr %next, null
  br i1 %done, label %exit, label %loop
exit:
  call void @kernel(ptr %.19, ptr %buffer, ptr %.18)
  ret void
}}
"""


def _helper_calls(text: str) -> list:
    return re.findall(r"call void @spine\.stream\.(\S+)\(ptr (%[\w.]+)", text)


def test_vector_stores_through_written_arguments_stream_and_nothing_else():
    rewritten = with_streaming_stores(MODULE, (1,), FLAG)
    # Through argument 1, in the entry (a loop-carried row pointer) and in the kernel (a parameter its
    # one call site passes argument 1 to): the 64- and 32-byte vectors. Not the 8-byte vector or the
    # scalar, not the stack buffer, not argument 0 (read-only here).
    assert _helper_calls(rewritten) == [("v16float.a4", "%out"), ("v16float.a4", "%row"), ("v8float.a4", "%row")]
    assert "store <16 x float> zeroinitializer, ptr %scratch, align 4" in rewritten
    assert "store <16 x float> zeroinitializer, ptr %input, align 4" in rewritten
    assert "store <16 x float> zeroinitializer, ptr %buffer, align 64" in rewritten
    assert "store <2 x float> zeroinitializer, ptr %row, align 4" in rewritten
    assert rewritten.count(f'load i8, ptr @"{FLAG}"') == 2    # once per function
    # The grid runtime fences each thread's share of a launch (cpp/grid.c); programs do not.
    assert _last_before_return(rewritten) == "  call void @kernel(ptr %.19, ptr %buffer, ptr %.18)"


def _last_before_return(module: str) -> str:
    entry = module[module.index("define void @spine_entry"):]
    entry = entry[:entry.index("\n}")]
    return re.findall(r"\n(.*)\n\s+ret void", entry)[-1]


@pytest.mark.parametrize("atomic", ["%old = atomicrmw add ptr %input, i32 1 acq_rel, align 4",
                                    "%pair = cmpxchg ptr %input, i32 0, i32 1 acq_rel monotonic, align 4",
                                    "store atomic i32 1, ptr %input release, align 4",
                                    "fence release"])
def test_stores_are_fenced_before_every_atomic_write(atomic):
    """Through an atomic one program may hand another what it stored, within the launch."""
    module = MODULE.replace("  ret void\n}\n\ndefine void @spine_entry",
                            f"  {atomic}\n  ret void\n}}\n\ndefine void @spine_entry")
    assert atomic in module
    rewritten = with_streaming_stores(module, (1,), FLAG)
    assert f"  call void @llvm.x86.sse.sfence()\n  {atomic}\n" in rewritten
    assert rewritten.count("call void @llvm.x86.sse.sfence()") == 1


def test_an_atomic_read_needs_no_fence():
    module = MODULE.replace("  ret void\n}\n\ndefine void @spine_entry",
                            "  %seen = load atomic i32, ptr %input acquire, align 4\n  ret void\n}\n\n"
                            "define void @spine_entry")
    assert "call void @llvm.x86.sse.sfence()" not in with_streaming_stores(module, (1,), FLAG)


def _streaming_pass(module_text: str, written_args=(1,)):
    """The streaming-stores pass of LLVM_PIPELINE on `module_text`: (the module after it, what it said)."""
    from spine.compiler import codegen
    llvm = codegen._llvm()
    tm = codegen._target_machine("x86_64-unknown-linux-gnu", "x86-64-v4", "")
    module = codegen.LlvmModule(llvm.parse_assembly(module_text))
    context = codegen.LlvmContext("", "x86_64-unknown-linux-gnu", tm, llvm.create_pass_builder(
        tm, llvm.create_pipeline_tuning_options(speed_level=3)), written_args)
    step = next(p for p in codegen.LLVM_PIPELINE if p.name == "streaming-stores")
    assert step.when(module, context)
    return module, step.rewrite(module, context), tm


def test_the_rewritten_module_compiles_to_non_temporal_stores_of_vectors_and_halves():
    module, note, tm = _streaming_pass(MODULE)
    assert note is None
    assembly = tm.emit_assembly(module.ref)
    assert re.search(r"vmovntps\s+%zmm", assembly)   # the whole 64-byte vector
    assert re.search(r"vmovntps\s+%ymm", assembly)   # its halves, and the 32-byte vector whole


def test_no_written_argument_no_rewrite():
    assert with_streaming_stores(MODULE, (), FLAG) == MODULE
    assert with_streaming_stores(MODULE.replace("spine_entry", "other"), (1,), FLAG) == MODULE.replace(
        "spine_entry", "other")


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


def test_a_rewrite_llvm_rejects_leaves_the_module_as_it_was_and_says_so(monkeypatch):
    from spine.compiler import codegen
    monkeypatch.setattr(codegen, "with_streaming_stores", lambda text, written, flag: text + "\nnot llvm ir\n")
    before = codegen._llvm().parse_assembly(MODULE)
    module, note, _ = _streaming_pass(MODULE)
    assert note.startswith("gave up: the rewritten module did not parse")
    assert str(module.ref) == str(before)


def test_a_kernel_whose_streaming_rewrite_gave_up_says_so_in_its_facts_and_dumps(monkeypatch, tmp_path):
    """The outcome reaches the compiled kernel (KernelFacts.gave_up) and SPINE_DUMP_PASSES' pass list."""
    import triton
    from spine.compiler import codegen
    from spine.driver import CPUDriver
    from tests.kernels import add_kernel
    if platform.machine() != "x86_64":
        pytest.skip("streaming stores are x86's")
    monkeypatch.setenv("SPINE_STREAMING_STORES_MB", "1")
    monkeypatch.setenv("SPINE_DUMP_PASSES", str(tmp_path))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(codegen, "with_streaming_stores", lambda text, written, flag: text + "\nnot llvm ir\n")
    from spine.compiler import pipeline
    monkeypatch.setattr(pipeline, "pool", lambda: _InProcessPool())
    triton.runtime.driver.set_active(CPUDriver(target="host"))
    x = torch.rand(4000)
    out = torch.empty_like(x)
    compiled = add_kernel[(4,)](x, x, out, 4000, BLOCK=1024)
    torch.testing.assert_close(out, 2 * x)
    gave_up = KernelFacts.from_metadata(compiled.metadata).gave_up
    assert [name for name, _ in gave_up] == ["streaming-stores"]
    assert "streaming-stores: gave up" in (tmp_path / "add_kernel.passes.txt").read_text()


class _InProcessPool:
    """Runs compile stages in this process, so that a test can replace a pass's function."""

    def prestart(self):
        pass

    @staticmethod
    def run(stage, **kwargs):
        from spine.compiler.compile_worker import STAGES
        return STAGES[stage](**kwargs)
