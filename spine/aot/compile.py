"""Compiling one kernel for one signature, through Spine's ordinary pipeline (and its compile cache), into
the kernel's object file, the compile's `obj` stage: the `spine_entry` entry point with everything else
internal, ready to be linked into a library with the grid runtime."""
from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import dataclass

from .signature import KernelSignature, kernel_signature


@dataclass(frozen=True)
class CompiledObject:
    name: str                 # the triton kernel's name
    signature: KernelSignature
    target: str               # "riscv64" or "host"
    triple: str
    cpu: str
    features: str
    codegen: str              # how LLVM really built it (a fallback may have replaced the CPU)
    written_args: tuple       # run-time argument indices the kernel may write through
    object: bytes


def load_kernel(spec: str):
    """`path/to/file.py:kernel_name` → the JITFunction (the file is executed, from its own directory)."""
    path, sep, name = spec.rpartition(":")
    if not sep or not path or not name:
        raise ValueError(f"{spec!r}: expected path/to/file.py:kernel_name")
    path = os.path.abspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such file")
    sys.path.insert(0, os.path.dirname(path))
    module_name = "spine_aot_" + os.path.splitext(os.path.basename(path))[0]
    module_spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    kernel = getattr(module, name, None)
    if kernel is None or not hasattr(kernel, "arg_names"):
        raise ValueError(f"{path} defines no @triton.jit kernel named {name!r}")
    return kernel


def triton_compile(kernel, sig: KernelSignature, target: str = "riscv64"):
    """The CompiledKernel of `kernel` for exactly this signature (no specialisation on argument values,
    unlike a launch), through triton's compile and cache."""
    import triton
    from triton.backends.compiler import GPUTarget

    from ..targets import target_from_name

    gpu_target = GPUTarget("cpu", target_from_name(target).name, 1)
    backend = triton.compiler.make_backend(gpu_target)
    options = backend.parse_options({})
    src = triton.compiler.ASTSource(fn=kernel, constexprs=sig.constexprs, signature=sig.triton_signature,
                                    attrs=sig.attrs())
    return triton.compile(src, target=gpu_target, options=options.__dict__), options


def compile_object(kernel, signature: str, constexprs: list[str], target: str = "riscv64") -> CompiledObject:
    """The kernel's `obj` artifact from the one compile triton ran (and cached)."""
    from ..compiler.pipeline import object_bytes
    from ..kernel_facts import KernelFacts

    sig = kernel_signature(kernel, signature, constexprs)
    compiled, options = triton_compile(kernel, sig, target)
    meta = compiled.metadata
    facts = KernelFacts.from_metadata(meta)
    if facts.bounds_checked:
        raise ValueError("ahead-of-time kernels are compiled without bounds checks (debug)")
    return CompiledObject(meta.name, sig, meta.arch, options.triple, facts.codegen_cpu, options.features,
                          facts.codegen, facts.written_args, object_bytes(compiled.asm["obj"]))
