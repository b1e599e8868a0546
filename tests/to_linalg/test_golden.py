"""What the conversion emits, pinned with FileCheck (shipped with the LLVM tools wheel)."""
import os
import subprocess

import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from tests.kernels import add_kernel, gather_kernel, row_reduce_kernel, row_sum_pointer_loop_kernel


def filecheck_binary() -> str:
    import llvm
    return os.path.join(os.path.dirname(llvm.__file__), "bin", "FileCheck")


def linalg_of(kernel, signature, constants) -> str:
    src = ASTSource(kernel, signature, constants)
    compiled = triton.compile(src, target=GPUTarget("cpu", "host", 1))
    return without_locations(compiled.asm["linalg"])


def without_locations(text: str) -> str:
    """The converted module keeps its source locations (for error messages and line tables); the checks
    read the IR alone."""
    from mlir import ir
    with ir.Context() as ctx:
        ctx.allow_unregistered_dialects = True
        return str(ir.Module.parse(text))


def filecheck(text: str, checks: str) -> None:
    import tempfile
    with tempfile.NamedTemporaryFile("w", suffix=".checks", delete=False) as f:
        f.write(checks)
    try:
        proc = subprocess.run([filecheck_binary(), f.name], input=text, capture_output=True, text=True)
    finally:
        os.unlink(f.name)
    assert proc.returncode == 0, proc.stderr + "\n" + text


def test_vector_add_is_a_masked_block_copy(fresh_cache):
    text = linalg_of(add_kernel, {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32",
                                  "BLOCK": "constexpr"}, {(4,): 128})
    filecheck(text, """
CHECK: func.func @add_kernel(%{{.*}}: memref<?xf32>, %{{.*}}: memref<?xf32>, %{{.*}}: memref<?xf32>, %{{.*}}: i32
CHECK: memref.reinterpret_cast %arg0 to offset: [%{{.*}}], sizes: [128], strides: [1]
CHECK: memref.subview
CHECK: linalg.copy
CHECK: arith.addf %{{.*}}, %{{.*}} : tensor<128xf32>
CHECK: bufferization.materialize_in_destination
CHECK-NOT: scf.for
""")


def test_loaded_indices_gather_in_a_loop(fresh_cache):
    text = linalg_of(gather_kernel, {"x_ptr": "*fp32", "idx_ptr": "*i32", "out_ptr": "*fp32", "n": "i32",
                                     "BLOCK": "constexpr"}, {(4,): 64})
    filecheck(text, """
CHECK: linalg.copy
CHECK: scf.for
CHECK: scf.if
CHECK: memref.load %arg0
""")


def test_reductions_cover_the_whole_row(fresh_cache):
    text = linalg_of(row_reduce_kernel, {"x_ptr": "*fp32", "sum_ptr": "*fp32", "max_ptr": "*fp32",
                                         "min_ptr": "*fp32", "M": "i32", "N": "i32", "stride_m": "i32",
                                         "BM": "constexpr", "BN": "constexpr"}, {(7,): 8, (8,): 16})
    filecheck(text, """
CHECK: linalg.fill ins(%{{.*}} : f32) outs(%{{.*}} : tensor<8xf32>)
CHECK: linalg.generic {{.*}}"parallel", "reduction"{{.*}} ins(%{{.*}} : tensor<8x16xf32>)
CHECK: arith.addf {{.*}} fastmath<reassoc>
CHECK: tensor.extract_slice %{{.*}}[0, 0] [8, 1] [1, 1] : tensor<8x16xf32> to tensor<8xf32>
CHECK: linalg.generic {{.*}}"parallel", "reduction"{{.*}} ins(%{{.*}} : tensor<8x16xf32>)
CHECK: arith.maxnumf {{.*}} fastmath<reassoc>
""")


def test_loop_carries_pointer_offset_only(fresh_cache):
    text = linalg_of(row_sum_pointer_loop_kernel, {"x_ptr": "*fp32", "out_ptr": "*fp32", "N": "i32",
                                                   "stride_m": "i32", "BLOCK": "constexpr"}, {(4,): 16})
    filecheck(text, """
CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%{{.*}} = %{{.*}}, %{{.*}} = %{{.*}}) -> (index, tensor<16xf32>)
CHECK: memref.reinterpret_cast %arg0 to offset: [%{{.*}}], sizes: [16], strides: [1]
""")


@triton.jit
def exp_kernel(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.exp(tl.load(x_ptr + offs)))


def test_unmasked_access_copies_whole_tile(fresh_cache):
    text = linalg_of(exp_kernel, {"x_ptr": "*fp32", "BLOCK": "constexpr"}, {(1,): 32})
    filecheck(text, """
CHECK: memref.reinterpret_cast %arg0 to offset: [0], sizes: [32], strides: [1]
CHECK-NOT: memref.subview
CHECK: math.exp
""")


