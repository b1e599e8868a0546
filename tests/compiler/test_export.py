"""The one fragile seam: switching libtriton's MLIR printer to generic form."""
import triton
import triton.language as tl
from mlir import ir

from spine.compiler.export import _symbol_offsets_uncached, _libtriton_path, export_generic


@triton.jit
def tiny_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2.0, mask=offs < n)


def _ttir():
    from triton.compiler import ASTSource
    from triton.backends.compiler import GPUTarget
    from triton._C.libtriton import ir as tir
    from spine.compiler.backend import CPUBackend
    backend = CPUBackend(GPUTarget("cpu", "host", 1))
    options = backend.parse_options({})
    src = ASTSource(tiny_kernel, {"x_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}, {(2,): 64})
    context = tir.context()
    tir.load_dialects(context)
    backend.load_dialects(context)
    return src.make_ir(backend.target, options, backend.get_codegen_implementation(options),
                       backend.get_module_map(), context)


def test_symbols_are_found_in_libtriton():
    offsets = _symbol_offsets_uncached(_libtriton_path())
    assert all(v > 0 for v in offsets.values())


def test_generic_ttir_parses_with_upstream_mlir():
    text = export_generic(_ttir())
    assert '"tt.func"' in text and '"tt.load"' in text
    with ir.Context() as ctx, ir.Location.unknown():
        ctx.allow_unregistered_dialects = True
        module = ir.Module.parse(text)
        names = set()
        module.operation.walk(lambda op: names.add(op.operation.name) or ir.WalkResult.ADVANCE)
    assert {"tt.func", "tt.load", "tt.store", "tt.make_range"} <= names
