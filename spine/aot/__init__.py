"""Ahead-of-time kernels: a `@triton.jit` kernel compiled for one signature into a shared library and a
C header with one plain C function, which runs the grid on all cores (`python -m spine.aot --help`).

    signature.py  the --signature / --constexpr syntax, matched against the kernel's parameters
    compile.py    Spine's pipeline → the kernel's object file
    header.py     the C header and the wrapper behind its function
    library.py    kernel object + wrapper + grid runtime → lib<name>.so
"""
from .compile import compile_object, load_kernel
from .library import AotLibrary, build_library


def compile_kernel(spec_or_kernel, signature: str, constexprs=(), target: str = "riscv64",
                   name: str | None = None, out_dir: str = ".") -> AotLibrary:
    """`spec_or_kernel`: a JITFunction or `path/to/file.py:kernel_name`."""
    kernel = load_kernel(spec_or_kernel) if isinstance(spec_or_kernel, str) else spec_or_kernel
    compiled = compile_object(kernel, signature, list(constexprs), target)
    return build_library(compiled, name or compiled.name, out_dir)


__all__ = ["AotLibrary", "build_library", "compile_kernel", "compile_object", "load_kernel"]
