"""Ahead-of-time kernels: `@triton.jit` kernels compiled for one signature each into a shared library and a
C header with one plain C function per kernel, which runs the grid on all cores (`python -m spine.aot`).

    signature.py  the --signature / --constexpr syntax, matched against the kernel's parameters
    compile.py    Spine's pipeline → the kernel's object file
    header.py     the C header and the wrapper behind each function
    library.py    kernel objects + wrappers + grid runtime → lib<name>.so
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .compile import compile_object, load_kernel
from .library import AotLibrary, build_library


@dataclass
class KernelSpec:
    """One kernel of a library: the kernel (a JITFunction or `path/to/file.py:kernel_name`), its signature
    and constexprs, and its C name (default: the kernel's)."""
    kernel: object
    signature: str
    constexprs: list = field(default_factory=list)
    name: str | None = None


def compile_library(specs: list[KernelSpec], target: str = "riscv64", library: str | None = None,
                    out_dir: str = ".") -> AotLibrary:
    """lib<library>.so and <library>.h with a C function for each spec. `library` may be left out for a
    single kernel (it is then the kernel's C name)."""
    kernels = []
    for spec in specs:
        kernel = load_kernel(spec.kernel) if isinstance(spec.kernel, str) else spec.kernel
        compiled = compile_object(kernel, spec.signature, list(spec.constexprs), target)
        kernels.append((compiled, spec.name or compiled.name))
    if library is None:
        if len(kernels) != 1:
            raise ValueError("a library of several kernels needs a name (--library)")
        library = kernels[0][1]
    return build_library(kernels, library, out_dir)


def compile_kernel(kernel, signature: str, constexprs=(), target: str = "riscv64", name: str | None = None,
                   out_dir: str = ".") -> AotLibrary:
    """A library of one kernel, named after its C function."""
    return compile_library([KernelSpec(kernel, signature, list(constexprs), name)], target, None, out_dir)


__all__ = ["AotLibrary", "KernelSpec", "build_library", "compile_kernel", "compile_library", "compile_object",
           "load_kernel"]
