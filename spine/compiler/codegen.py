"""Stage `obj`: LLVM IR → optimised machine code for the target (llvmlite, LLVM 22, O3 with the loop and
SLP vectorisers; with +v they emit RVV 1.0 code that is vector-length agnostic)."""
from __future__ import annotations

import functools
import threading
from dataclasses import dataclass

from ..targets import generic_cpu
from .streaming_stores import FLAG_SYMBOL, with_streaming_stores

_init_lock = threading.Lock()


@functools.lru_cache(maxsize=None)
def _llvm():
    import llvmlite.binding as llvm
    with _init_lock:
        llvm.initialize_all_targets()
        llvm.initialize_all_asmprinters()
    return llvm


@dataclass(frozen=True)
class CodegenConfig:
    """What LLVM is told: the CPU to tune for, and whether the loop vectoriser runs."""
    cpu: str
    loop_vectorize: bool = True

    def describe(self) -> str:
        return f"cpu={self.cpu}" + ("" if self.loop_vectorize else ", loop vectoriser off")


def safer_configs(triple: str, cpu: str, features: str) -> list[CodegenConfig]:
    """What to retry with after LLVM crashed, safest last: the same instruction set tuned for no particular
    core (LLVM's per-core cost models are where its assertions have fired), then without the loop
    vectoriser too."""
    generic = generic_cpu(triple, cpu, features)
    configs = [CodegenConfig(generic)] if generic != cpu else []
    return configs + [CodegenConfig(generic, loop_vectorize=False)]


def _target_machine(triple: str, cpu: str, features: str):
    llvm = _llvm()
    target = llvm.Target.from_triple(triple)
    return target.create_target_machine(cpu=cpu, features=features, opt=3, reloc="pic", codemodel="default")


def _internalize_all_but_entry(module) -> None:
    """Only the entry point is exported. A kernel left visible would be called through the PLT, and a
    kernel named like a C library function (`div`, `exp`) would then bind to that function instead."""
    from .entry import ENTRY_SYMBOL
    for function in module.functions:
        if not function.is_declaration and function.name != ENTRY_SYMBOL:
            function.linkage = "internal"


def optimize_and_emit(llvm_ir: str, entry_ir: str, triple: str, cpu: str, features: str,
                      want_assembly: bool = False, loop_vectorize: bool = True, written_args: tuple = ()):
    """Returns (object bytes, assembly text or None). `written_args`: the runtime arguments the kernel
    stores through, whose stores may stream when the entry point has the flag for it."""
    llvm = _llvm()
    tm = _target_machine(triple, cpu, features)
    module = llvm.parse_assembly(llvm_ir)
    module.triple = triple
    module.data_layout = str(tm.target_data)
    entry = llvm.parse_assembly(entry_ir)
    entry.data_layout = str(tm.target_data)
    module.link_in(entry)
    _internalize_all_but_entry(module)
    module.verify()
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = loop_vectorize
    pto.slp_vectorization = True
    pb = llvm.create_pass_builder(tm, pto)
    pm = pb.getModulePassManager()
    pm.run(module, pb)
    if _has_global(module, FLAG_SYMBOL):
        module = _with_streaming_stores(module, written_args, tm, pb)
    obj = tm.emit_object(module)
    asm = tm.emit_assembly(module) if want_assembly else None
    return obj, asm


def _has_global(module, name: str) -> bool:
    return any(g.name == name for g in module.global_variables)


def _with_streaming_stores(module, written_args: tuple, tm, pb):
    text = str(module)
    rewritten = with_streaming_stores(text, written_args)
    if rewritten == text:
        return module
    llvm = _llvm()
    try:
        rewritten_module = llvm.parse_assembly(rewritten)
        rewritten_module.verify()
    except RuntimeError:
        # The rewrite works on IR text (streaming_stores.py): an instruction shape it misread must cost
        # the kernel its streaming stores, never its compile.
        return module
    module = rewritten_module
    pm = llvm.create_new_module_pass_manager()
    pm.add_always_inliner_pass()
    pm.run(module, pb)
    return module
