"""A compiled kernel's asm["ttir"] is in triton's own syntax, also after other kernels were exported to
generic form for the conversion (the printer switch is on only while Spine exports)."""
import triton
import triton.language as tl

from tests.compiler.test_export import _ttir
from spine.compiler.export import export_generic


@triton.jit
def constant_kernel(out_ptr):
    tl.store(out_ptr, 1.5)


def test_kernel_ttir_keeps_triton_syntax(fresh_cache):
    export_generic(_ttir())                     # another kernel exported before
    compiled = triton.compile(triton.compiler.ASTSource(constant_kernel, {"out_ptr": "*fp32"}, {}),
                              target=triton.backends.compiler.GPUTarget("cpu", "host", 1))
    text = compiled.asm["ttir"]
    assert "tt.func public @constant_kernel" in text and "arith.constant 1.500000e+00 : f32" in text
    assert '"tt.func"' in export_generic(_ttir())
    assert "tt.func public @tiny_kernel" in str(_ttir())
