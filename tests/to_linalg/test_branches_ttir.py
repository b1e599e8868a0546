"""Unstructured control flow from TTIR text (to_linalg/branches.py): CFGs triton's frontend does not emit
today (a loop made of branches, pointers carried around it), converted, lifted into scf, and run."""
import pytest
import torch
import triton
import triton.language as tl

from spine.to_linalg import convert_ttir
from tests.to_linalg.test_golden import filecheck, without_locations

# sum of i*i for i < n, each square stored through a pointer advanced around the loop's back edge
LOOP = """
module {
  tt.func public @branch_loop(%out: !tt.ptr<i32>, %n: i32) {
    %c0 = arith.constant 0 : i32
    %c1 = arith.constant 1 : i32
    cf.br ^bb1(%c0, %c0, %out : i32, i32, !tt.ptr<i32>)
  ^bb1(%i: i32, %acc: i32, %p: !tt.ptr<i32>):
    %done = arith.cmpi sge, %i, %n : i32
    cf.cond_br %done, ^bb3, ^bb2
  ^bb2:
    %sq = arith.muli %i, %i : i32
    %acc2 = arith.addi %acc, %sq : i32
    tt.store %p, %sq : !tt.ptr<i32>
    %p2 = tt.addptr %p, %c1 : !tt.ptr<i32>, i32
    %i2 = arith.addi %i, %c1 : i32
    cf.br ^bb1(%i2, %acc2, %p2 : i32, i32, !tt.ptr<i32>)
  ^bb3:
    tt.store %p, %acc : !tt.ptr<i32>
    tt.return
  }
}
"""

# a tile of pointers whose stride grows around the back edge: out[i * k] += 1 for k = 1..n
GROWING_STRIDE = """
module {
  tt.func public @growing_stride(%out: !tt.ptr<i32>, %n: i32) {
    %c1 = arith.constant 1 : i32
    %ones = arith.constant dense<1> : tensor<4xi32>
    %offs = tt.make_range {end = 4 : i32, start = 0 : i32} : tensor<4xi32>
    %base = tt.splat %out : !tt.ptr<i32> -> tensor<4x!tt.ptr<i32>>
    %ptrs = tt.addptr %base, %offs : tensor<4x!tt.ptr<i32>>, tensor<4xi32>
    cf.br ^bb1(%c1, %ptrs : i32, tensor<4x!tt.ptr<i32>>)
  ^bb1(%k: i32, %p: tensor<4x!tt.ptr<i32>>):
    %done = arith.cmpi sgt, %k, %n : i32
    cf.cond_br %done, ^bb3, ^bb2
  ^bb2:
    %old = tt.load %p : tensor<4x!tt.ptr<i32>>
    %new = arith.addi %old, %ones : tensor<4xi32>
    tt.store %p, %new : tensor<4x!tt.ptr<i32>>
    %p2 = tt.addptr %p, %offs : tensor<4x!tt.ptr<i32>>, tensor<4xi32>
    %k2 = arith.addi %k, %c1 : i32
    cf.br ^bb1(%k2, %p2 : i32, tensor<4x!tt.ptr<i32>>)
  ^bb3:
    tt.return
  }
}
"""


def parse_ttir(text: str, tmp_path):
    from triton._C.libtriton import ir
    from triton.compiler.compiler import parse
    path = tmp_path / "kernel.ttir"
    path.write_text(text)
    context = ir.context()
    ir.load_dialects(context)
    return parse(str(path), "ttir", context)


def converted(text: str, tmp_path) -> str:
    from spine.compiler.export import export_generic
    return without_locations(convert_ttir(export_generic(parse_ttir(text, tmp_path))).text)


def test_loop_of_branches_becomes_a_while_carrying_the_pointer_offset(tmp_path):
    filecheck(converted(LOOP, tmp_path), r"""
CHECK: func.func @branch_loop
CHECK-NOT: {{ cf\.}}
CHECK: scf.while {{.*}} : (i32, i32, index
CHECK-NOT: {{ cf\.}}
""")


def test_pointer_whose_strides_change_around_a_back_edge_is_gathered(tmp_path):
    filecheck(converted(GROWING_STRIDE, tmp_path), r"""
CHECK: scf.while {{.*}}tensor<4xi64>
CHECK-NOT: {{ cf\.}}
""")


# Stand-ins with the names and signatures of the TTIR above: their compiles are handed the TTIR text.
@triton.jit
def branch_loop(out, n):
    pass


@triton.jit
def growing_stride(out, n):
    pass


@pytest.fixture
def compile_ttir(monkeypatch, fresh_cache, tmp_path):
    """Makes the next compile use the given TTIR text as its ttir stage (n must not be 1: triton would
    specialise it away)."""
    import spine.compiler.pipeline as pipeline
    from triton.compiler.compiler import parse
    real = pipeline.make_ttir

    def use(text):
        path = tmp_path / "override.ttir"
        path.write_text(text)

        def make_ttir(mod, metadata, options):
            real(mod, metadata, options)          # names the kernel in the metadata
            return parse(str(path), "ttir", mod.context)
        monkeypatch.setattr(pipeline, "make_ttir", make_ttir)
    return use


def test_loop_of_branches_runs(target, compile_ttir):
    compile_ttir(LOOP)
    out = torch.full((8,), -1, dtype=torch.int32)
    branch_loop[(1,)](out, 5)
    assert out.tolist() == [0, 1, 4, 9, 16, 30, -1, -1]


def test_growing_stride_loop_runs(target, compile_ttir):
    compile_ttir(GROWING_STRIDE)
    out = torch.zeros(16, dtype=torch.int32)
    growing_stride[(1,)](out, 3)
    expected = torch.zeros(16, dtype=torch.int32)
    for k in range(1, 4):
        expected[torch.arange(4) * k] += 1
    assert torch.equal(out, expected)
