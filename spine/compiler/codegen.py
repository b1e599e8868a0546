"""Stage `llir`, its LLVM half, and stage `obj`.

`optimize` runs LLVM_PIPELINE on the LLVM IR the MLIR lowering translated: Spine's LLVM-level rewrites
and LLVM's own O3 pipeline (llvmlite, LLVM 22, with the loop and SLP vectorisers; with +v they emit RVV
1.0 code that is vector-length agnostic). The optimised module's text is the `llir` artifact, and the
object emitted from it (in the same call: see optimize) the `obj` artifact.

Every rewrite goes through llvmlite's API on a parsed module (names, linkage, module linking). llvmlite
can neither insert nor change instructions, so rewrites of instructions belong to the MLIR half
(lower.LLIR_PIPELINE), where the information they need is still there."""
from __future__ import annotations

import functools
import os
import re
import tempfile
import threading
from dataclasses import dataclass

from ..targets import generic_cpu
from .passes import Pass, PassRecord, run_pipeline
from ..ir_names import ENTRY_SYMBOL

_init_lock = threading.Lock()
RUNTIME_CALL_PREFIX = "__kmpc_"      # the OpenMP runtime ABI the translation of smt.parallel loops calls
SPINE_RUNTIME_PREFIX = "spine_kmpc_"  # cpp/parallel_loops.c


# The loop vectoriser's remainder iterations run as a scalar epilogue, not folded into a last, partial
# vector iteration. RISC-V's default folds the tail (an EVL loop: every iteration sets vl), which costs
# a whole vector iteration however few the remaining elements, and the vectoriser's iterations across
# unrolled tiles are long: a SmolLM2 head row of 18 blocks ran as 16 blocks and 2 blocks, each 300 guest
# instructions, where a scalar epilogue takes the 2 for about 37 each (1.60 -> 0.96 instructions a weight,
# bench/RESULTS.md). x86's vectoriser keeps an epilogue by default: there this changes nothing. LLVM has
# this choice only as a process-wide option, set once before anything is compiled.
LLVM_OPTIONS = ("-prefer-predicate-over-epilogue=scalar-epilogue",)


@functools.lru_cache(maxsize=None)
def _llvm():
    import llvmlite.binding as llvm
    with _init_lock:
        llvm.initialize_all_targets()
        llvm.initialize_all_asmprinters()
        for option in LLVM_OPTIONS:
            llvm.set_option("spine", option)
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


@dataclass
class LlvmModule:
    """The module the LLVM passes rewrite (a pass may replace it with a new one)."""
    ref: object

    def __str__(self) -> str:
        return str(self.ref)


@dataclass
class LlvmContext:
    """What the LLVM passes are given besides the module."""
    entry_ir: str
    triple: str
    tm: object
    pass_builder: object
    # The MLIR half found bf16 values (its bf16-as-integers pass ran): LLVM's bfloat comes only from them,
    # and walking every instruction here to find it took a fifth of a second on a 3,000-instruction kernel.
    bf16: bool = False


def _rename_runtime_calls(module: LlvmModule, context: LlvmContext) -> None:
    """__kmpc_* → spine_kmpc_*: the kernel binds to Spine's runtime, never to an OpenMP library that
    happens to be loaded in the same process.

        declare void @__kmpc_fork_call(ptr, i32, ptr, ...)   becomes   declare void @spine_kmpc_fork_call(...)"""
    for function in module.ref.functions:
        if function.name.startswith(RUNTIME_CALL_PREFIX):
            function.name = SPINE_RUNTIME_PREFIX + function.name[len(RUNTIME_CALL_PREFIX):]


def _calls_openmp_runtime(module: LlvmModule, context: LlvmContext) -> bool:
    """for smt.parallel loops (calls of the OpenMP runtime)"""
    return any(f.name.startswith(RUNTIME_CALL_PREFIX) for f in module.ref.functions)


# LLVM keeps a bf16 value that lives in a register across a loop (a phi, a select) as an f32 and narrows
# it with a call to __truncsfbf2 when the target has no bf16 instructions (RISC-V without Zfbfmin), and
# atomic bf16 adds expand to such calls too; the compiler-rt linked into kernels has no bf16 helpers. The
# kernel defines its own: round to nearest even on the bits, NaN kept quiet (weak, so a library's wins; kept
# through LLVM's dead-code removal, which runs before codegen introduces the calls).
BF16_TRUNCATION = """
@llvm.compiler.used = appending global [1 x ptr] [ptr @__truncsfbf2], section "llvm.metadata"
define weak hidden bfloat @__truncsfbf2(float %x) {
  %bits = bitcast float %x to i32
  %lsb = lshr i32 %bits, 16
  %odd = and i32 %lsb, 1
  %bias = add i32 %odd, 32767
  %rounded = add i32 %bits, %bias
  %high = lshr i32 %rounded, 16
  %quiet = or i32 %lsb, 64
  %nan = fcmp uno float %x, %x
  %chosen = select i1 %nan, i32 %quiet, i32 %high
  %half = trunc i32 %chosen to i16
  %result = bitcast i16 %half to bfloat
  ret bfloat %result
}
"""


def _uses_bfloat(module: LlvmModule, context: LlvmContext) -> bool:
    """for modules with bfloat values and no __truncsfbf2 of their own"""
    return context.bf16 and not any(f.name == "__truncsfbf2" and not f.is_declaration for f in module.ref.functions)


def _define_bf16_truncation(module: LlvmModule, context: LlvmContext) -> None:
    """Links in BF16_TRUNCATION, a module of its own: `declare bfloat @__truncsfbf2(float)` (or none)
    becomes its weak definition."""
    llvm = _llvm()
    helper = llvm.parse_assembly(BF16_TRUNCATION)
    helper.triple = module.ref.triple
    helper.data_layout = module.ref.data_layout
    module.ref.link_in(helper)


def _link_entry(module: LlvmModule, context: LlvmContext) -> None:
    """Links in the uniform entry point (entry.py), and internalizes all but it: a kernel left visible
    would be called through the PLT, and a kernel named like a C library function (`div`, `exp`) would then
    bind to that function instead.

        define void @k(...)                 becomes   define internal void @k(...)
                                                      define void @spine_entry(ptr %args, i32 ...) { call @k }"""
    llvm = _llvm()
    entry = llvm.parse_assembly(context.entry_ir)
    entry.data_layout = module.ref.data_layout
    module.ref.link_in(entry)
    for function in module.ref.functions:
        if not function.is_declaration and function.name != ENTRY_SYMBOL:
            function.linkage = "internal"
    module.ref.verify()


def _o3(module: LlvmModule, context: LlvmContext) -> None:
    """LLVM's default O3 pipeline, tuned for the target machine (its pass builder carries the vectorisers'
    settings)."""
    pm = context.pass_builder.getModulePassManager()
    pm.run(module.ref, context.pass_builder)


# The llir stage's LLVM half, after the MLIR lowering's translation.
LLVM_PIPELINE = (
    Pass("rename-runtime-calls", "__kmpc_* calls bind to Spine's runtime (spine_kmpc_*)", _rename_runtime_calls,
         _calls_openmp_runtime),
    Pass("define-bf16-truncation", "the kernel's own __truncsfbf2 (compiler-rt has none)", _define_bf16_truncation,
         _uses_bfloat),
    Pass("link-entry", "the uniform entry point linked in, everything else internal (entry.py)", _link_entry),
    Pass("o3", "LLVM's O3 pipeline, vectorisers included (loop unrolling not on x86: codegen.unrolls_loops)", _o3),
)


@dataclass(frozen=True)
class Optimized:
    """The llir stage's LLVM half: the optimised module's text, what each pass did, and the machine code
    emitted from that module (see optimize)."""
    text: str
    record: PassRecord
    obj: bytes
    asm: str | None


def unrolls_loops(triple: str) -> bool:
    """Whether O3 unrolls loops for `triple`: not on x86. Unrolling runs before the loop vectoriser and
    fully unrolls a tile's short inner loops (the 16 lanes of a block, the rows of a program); the vectoriser
    then vectorises the loop around them, across rows, where every access is strided, and on x86 each such
    vector becomes a gather or a scatter (a block-scaled GEMV ran 10x slower for some tile shapes). Without
    unrolling it vectorises the inner loops themselves. RISC-V keeps unrolling: there it saves instructions
    (a decoded SmolLM2 token 9 % fewer) and the vectoriser's RVV code does not gather."""
    return not triple.startswith("x86_64")


def optimize(llvm_ir: str, entry_ir: str, triple: str, cpu: str, features: str, loop_vectorize: bool = True,
             want_assembly: bool = False, dump=None, bf16: bool = False) -> Optimized:
    """LLVM_PIPELINE on `llvm_ir`, and the object emitted from the result. `bf16`: the MLIR half found bf16
    values.

    Why emit here and not from the text in the obj stage: LLVM's code generation depends on the order of
    each value's use list, which the optimised module has in memory and neither its text nor its bitcode
    keeps (the same IR parsed again allocates other registers: a kernel's instruction count would move).
    So the object is emitted from the very module O3 produced; `emit` remains for an optimised module that
    only exists as text."""
    llvm = _llvm()
    tm = _target_machine(triple, cpu, features)
    module = llvm.parse_assembly(llvm_ir)
    module.triple = triple
    module.data_layout = str(tm.target_data)
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = loop_vectorize
    pto.slp_vectorization = True
    pto.loop_unrolling = unrolls_loops(triple)
    context = LlvmContext(entry_ir, triple, tm, llvm.create_pass_builder(tm, pto), bf16)
    holder = LlvmModule(module)
    record = run_pipeline(holder, LLVM_PIPELINE, context, dump)
    return Optimized(str(holder.ref), record, *_machine_code(tm, holder.ref, want_assembly, cpu, features))


def emit(optimized_ir: str, triple: str, cpu: str, features: str, want_assembly: bool = False):
    """(object bytes, assembly text or None) of an optimised module given as text."""
    tm = _target_machine(triple, cpu, features)
    return _machine_code(tm, _llvm().parse_assembly(optimized_ir), want_assembly, cpu, features)


def _machine_code(tm, module, want_assembly: bool, cpu: str, features: str):
    if tm.triple.startswith("riscv64"):
        text = str(module)
        # llvmlite has no RISC-V assembly parser, which LLVM needs for inline assembly even to print it. Only
        # the walk of every instruction would tell llvmlite whether a module holds any; the printed module
        # says so in one search (a call of `asm`: string constants print quotes as \22).
        if _INLINE_ASSEMBLY.search(text):
            return _clang_machine_code(text, cpu, features, want_assembly)
    return tm.emit_object(module), tm.emit_assembly(module) if want_assembly else None


_INLINE_ASSEMBLY = re.compile(r'\basm (?:sideeffect |alignstack |inteldialect |unwind )*"')


def _clang_machine_code(text: str, cpu: str, features: str, want_assembly: bool):
    """(object, assembly or None) of an optimised module by zig's clang (LLVM 22, as llvmlite's, with the
    assembly parsers): code generation only (`-disable-llvm-passes`: the module is optimised already), for
    the same CPU and features, position independent as llvmlite's target machine makes it."""
    from ..zig import zig
    flags = ["-target", "riscv64-linux-gnu", f"-mcpu={cpu.replace('-', '_')}", f"-mabi={_float_abi(features)}",
             "-O3", "-fPIC", "-Xclang", "-disable-llvm-passes", "-Wno-override-module"]
    for feature in filter(None, features.split(",")):
        flags += ["-Xclang", "-target-feature", "-Xclang", feature]
    with tempfile.TemporaryDirectory(prefix="spine-clang-") as directory:
        source, obj, asm = (os.path.join(directory, name) for name in ("kernel.ll", "kernel.o", "kernel.s"))
        with open(source, "w") as f:
            f.write(text)
        zig("cc", *flags, "-c", source, "-o", obj)
        if want_assembly:
            zig("cc", *flags, "-S", source, "-o", asm)
        with open(obj, "rb") as f:
            code = f.read()
        assembly = None
        if want_assembly:
            with open(asm) as f:
                assembly = f.read()
    return code, assembly


def _float_abi(features: str) -> str:
    """The riscv64 calling convention of code with `features`, as llvmlite's target machine picks it (lp64d
    with D): clang takes its default from -mcpu alone, and `generic_rv64` has no F or D, so a K3 A100 kernel
    (generic-rv64 plus features) came out soft-float, which the guest's loader refused to load."""
    enabled = set(filter(None, features.split(",")))
    return "lp64d" if "+d" in enabled else "lp64f" if "+f" in enabled else "lp64"


def optimize_and_emit(llvm_ir: str, entry_ir: str, triple: str, cpu: str, features: str,
                      want_assembly: bool = False, loop_vectorize: bool = True, bf16: bool = False):
    """(object bytes, assembly text or None) of `llvm_ir` (tests and tools that want a module's code)."""
    result = optimize(llvm_ir, entry_ir, triple, cpu, features, loop_vectorize, want_assembly,
                      bf16=bf16)
    return result.obj, result.asm
