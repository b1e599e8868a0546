"""Boolean buffers hold a byte per element (compiler/boolean_buffers.py): from IR text, and a kernel whose
loops carry tiles, for which deallocation passes ownership flags through boolean buffers, against torch on
both targets."""
import pytest
import torch
import triton
import triton.language as tl

from spine.compiler.boolean_buffers import booleans_as_bytes
from spine.errors import SpineCompilationError
from tests.compiler.ir_rewrites import rewritten
from tests.to_linalg.test_golden import filecheck

FLAGS = """
func.func private @helper(%flags: memref<?xi1>) {
  %c0 = arith.constant 0 : index
  %f = memref.load %flags[%c0] : memref<?xi1>
  %n = arith.xori %f, %f : i1
  memref.store %n, %flags[%c0] : memref<?xi1>
  return
}
func.func @k(%b: i1, %out: memref<i1>) {
  %c0 = arith.constant 0 : index
  %m = memref.alloc() : memref<2xi1>
  memref.store %b, %m[%c0] : memref<2xi1>
  %cast = memref.cast %m : memref<2xi1> to memref<?xi1>
  func.call @helper(%cast) : (memref<?xi1>) -> ()
  %v = memref.load %m[%c0] : memref<2xi1>
  memref.store %v, %out[] : memref<i1>
  memref.dealloc %m : memref<2xi1>
  return
}
"""


def test_boolean_buffers_become_byte_buffers_widened_at_stores_and_narrowed_at_loads():
    text = rewritten(FLAGS, booleans_as_bytes)
    assert "xi1>" not in text and "memref<i1>" not in text
    filecheck(text, """
CHECK: func.func private @helper(%[[FLAGS:.*]]: memref<?xi8>)
CHECK: %[[F8:.*]] = memref.load %[[FLAGS]][%{{.*}}] : memref<?xi8>
CHECK-NEXT: %[[F:.*]] = arith.trunci %[[F8]] : i8 to i1
CHECK-NEXT: %[[N:.*]] = arith.xori %[[F]], %[[F]] : i1
CHECK-NEXT: %[[N8:.*]] = arith.extui %[[N]] : i1 to i8
CHECK-NEXT: memref.store %[[N8]], %[[FLAGS]][%{{.*}}] : memref<?xi8>
CHECK: func.func @k(%[[B:.*]]: i1, %[[OUT:.*]]: memref<i8>)
CHECK: %[[M:.*]] = memref.alloc() : memref<2xi8>
CHECK-NEXT: %[[B8:.*]] = arith.extui %[[B]] : i1 to i8
CHECK-NEXT: memref.store %[[B8]], %[[M]]
CHECK-NEXT: %[[CAST:.*]] = memref.cast %[[M]] : memref<2xi8> to memref<?xi8>
CHECK-NEXT: call @helper(%[[CAST]]) : (memref<?xi8>) -> ()
CHECK: arith.trunci
CHECK: memref.dealloc %[[M]] : memref<2xi8>
""")


def test_a_module_without_boolean_buffers_is_left_alone():
    text = FLAGS.replace("i1", "i32")
    assert rewritten(text, booleans_as_bytes) == rewritten(text, lambda module: None)


def test_a_vector_access_to_a_boolean_buffer_is_refused_with_the_op():
    vector_read = """
func.func @k(%m: memref<8xi1>) -> vector<8xi1> {
  %c0 = arith.constant 0 : index
  %v = vector.load %m[%c0] : memref<8xi1>, vector<8xi1>
  return %v : vector<8xi1>
}
"""
    with pytest.raises(SpineCompilationError, match="boolean tensor kept in memory and accessed by vector.load"):
        rewritten(vector_read, booleans_as_bytes)


def test_a_boolean_constant_in_memory_is_refused():
    constant = """
memref.global "private" constant @mask : memref<4xi1> = dense<[true, false, true, true]>
func.func @k() -> i1 {
  %c0 = arith.constant 0 : index
  %m = memref.get_global @mask : memref<4xi1>
  %v = memref.load %m[%c0] : memref<4xi1>
  return %v : i1
}
"""
    with pytest.raises(SpineCompilationError, match="accessed by memref.global"):
        rewritten(constant, booleans_as_bytes)


@triton.jit
def carried_tiles_kernel(x, out, flags, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    seen = offs < 0
    for j in range(0, n):
        if j == 0:                  # the loop's tiles come from one of two buffers: ownership known at run time
            a = tl.load(x + offs)
            b = tl.load(x + BLOCK + offs)
        else:
            a = tl.load(out + offs)
            b = tl.load(out + BLOCK + offs)
        for i in range(4):
            a2 = a + b * 0.5
            b = b - a * 0.25
            a = a2
            seen = seen ^ (a > b)
        tl.store(out + offs, a)
        tl.store(out + BLOCK + offs, b)
    tl.store(flags + offs, seen)


@pytest.mark.parametrize("steps", [2, 5])   # not 1: triton specializes n == 1
def test_tiles_carried_through_loops_and_branches(target, fresh_cache, monkeypatch, tmp_path, steps):
    monkeypatch.setenv("SPINE_DUMP_PASSES", str(tmp_path))
    x = torch.randn(2, 32)
    out = torch.empty(2, 32)
    flags = torch.empty(32, dtype=torch.bool)
    carried_tiles_kernel[(1,)](x, out, flags, steps, BLOCK=32)
    a, b = x[0].clone(), x[1].clone()
    seen = torch.zeros(32, dtype=torch.bool)
    for _ in range(steps):
        for _ in range(4):
            a, b = a + b * 0.5, b - a * 0.25
            seen ^= a > b
    torch.testing.assert_close(out, torch.stack([a, b]))
    assert torch.equal(flags, seen)
    listing = (tmp_path / "carried_tiles_kernel.passes.txt").read_text()
    assert " booleans-as-bytes: changed" in listing
