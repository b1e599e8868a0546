"""Stage `llir`, its MLIR half: the passes of LLIR_PIPELINE (below) from linalg on tensors down to the
LLVM dialect, then LLVM IR.

Loops come out scalar here; LLVM's loop vectoriser turns them into RVV (or AVX) code in codegen.py.
The MLIR → LLVM IR translation has no Python API, so we call the C API through ctypes.

    python -m spine.compiler.lower list                 the passes, in order
    python -m spine.compiler.lower run NAME [FILE]      one pass on an MLIR module's text"""
from __future__ import annotations

import ctypes
import functools
import os
from dataclasses import dataclass

from typing import Callable

from ..ir_walk import collect_ops
from .atomic_expansion import expand_compare_and_swap
from .boolean_buffers import booleans_as_bytes, has_boolean_buffers
from .buffer_placement import copies_to_linalg, small_tiles_on_stack
from .byte_dots import byte_dots_on_vnni
from .carried_products import carried_products_into_destination
from .carried_tiles import update_carried_tiles_in_place
from .edge_tile_reads import mark_edge_tiles, read_edge_tiles_in_place
from .loop_fusion import fuse_adjacent_loops
from .loop_splitting import split_loops_at_bounds
from .math_expansion import expand_math
from .multiply_adds import contract_multiply_adds
from .number_reductions import reduce_without_nans
from .passes import Pass, run_pipeline, run_upstream, upstream
from .products_into_destination import store_products_in_place
from .shared_panels import share_packed_panels
from .stores_in_place import stores_in_place
from .tile_branches import split_tile_branches
from .streaming_stores import stream_stores
from .window_reads import read_windows_in_place
from .written_tiles import read_written_tiles_as_edge_tiles
from .unread_stores import drop_unread_stores
from .recomputed_tiles import recompute_tiles
from . import parallel_loops

# No cse before fusion: it would merge the per-use copies of materialised masks and index tensors into one
# multi-use producer, which the fusion leaves alone (and bufferizes into a temporary).
FUSE_ELEMENTWISE = "canonicalize,convert-elementwise-to-linalg,linalg-fuse-elementwise-ops,canonicalize,cse"
BUFFERIZE = ",".join([
    "one-shot-bufferize{allow-return-allocs-from-loops=true}",
    "canonicalize", "cse",
])
# After smt.parallel loops became scf.parallel (parallel_loops.py), which hoisting leaves alone: an
# iteration's buffers must stay its own.
HOIST = "func.func(buffer-loop-hoisting)"
DEALLOCATE = "buffer-deallocation-pipeline"
# Every expansion math-expand-ops has except fma's, which would split math.fma into a multiply and an add
# rounded twice (LLVM emits fused multiply-adds, or the C library's fma, for it), and tanh's and powf's,
# which lose accuracy (tanh near 0, powf for large results): math_expansion.py has f32 ones, f64 calls the
# C library.
EXPANDED_MATH_OPS = ("ctlz", "sinh", "cosh", "tan", "asinh", "acosh", "atanh", "ceil", "exp2", "fpowi", "round",
                     "roundeven", "rsqrt")
TO_LOOPS = ",".join([
    "convert-linalg-to-loops",
    "math-extend-to-supported-types",
    f"math-expand-ops{{ops={','.join(EXPANDED_MATH_OPS)}}}",
])
# bf16 arithmetic in f32, and bf16 conversions as integer ops: LLVM would otherwise call compiler-rt's
# __truncsfbf2 (zig's compiler-rt has no bf16 helpers). Only for kernels with bf16: arith-expand also
# rewrites max/min into compares, which blocks vectorised reductions.
BF16_TO_INTEGER_OPS = "arith-emulate-unsupported-floats{source-types=bf16 target-type=f32},arith-expand{include-bf16=true}"
TO_LLVM = ",".join([
    "convert-math-to-llvm", "convert-math-to-libm",
    "expand-strided-metadata", "lower-affine", "convert-scf-to-cf",
    "finalize-memref-to-llvm", "convert-to-llvm", "reconcile-unrealized-casts",
    "canonicalize",
])


LINE_TABLES = "ensure-debug-info-scope-on-llvm-func{emission-kind=LineTablesOnly}"


@functools.lru_cache(maxsize=None)
def _capi():
    import mlir._mlir_libs as libs
    lib = ctypes.CDLL(os.path.join(os.path.dirname(libs.__file__), "libMLIRPythonCAPI.so"))
    lib.mlirRegisterAllLLVMTranslations.argtypes = [ctypes.c_void_p]
    lib.mlirTranslateModuleToLLVMIR.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    lib.mlirTranslateModuleToLLVMIR.restype = ctypes.c_void_p
    lib.LLVMContextCreate.restype = ctypes.c_void_p
    lib.LLVMContextDispose.argtypes = [ctypes.c_void_p]
    lib.LLVMPrintModuleToString.argtypes = [ctypes.c_void_p]
    lib.LLVMPrintModuleToString.restype = ctypes.c_void_p
    lib.LLVMDisposeMessage.argtypes = [ctypes.c_void_p]
    lib.LLVMDisposeModule.argtypes = [ctypes.c_void_p]
    return lib


def _capsule_pointer(obj, name: bytes) -> int:
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype = ctypes.c_void_p
    get.argtypes = [ctypes.py_object, ctypes.c_char_p]
    return get(obj._CAPIPtr, name)


def to_llvm_ir(module) -> str:
    lib = _capi()
    context = _capsule_pointer(module.context, b"mlir.ir.Context._CAPIPtr")
    operation = _capsule_pointer(module.operation, b"mlir.ir.Operation._CAPIPtr")
    lib.mlirRegisterAllLLVMTranslations(context)
    llvm_context = lib.LLVMContextCreate()
    try:
        llvm_module = lib.mlirTranslateModuleToLLVMIR(operation, llvm_context)
        if not llvm_module:
            raise RuntimeError("MLIR → LLVM IR translation failed")
        text_ptr = lib.LLVMPrintModuleToString(llvm_module)
        text = ctypes.string_at(text_ptr).decode()
        lib.LLVMDisposeMessage(text_ptr)
        lib.LLVMDisposeModule(llvm_module)
        return text
    finally:
        lib.LLVMContextDispose(llvm_context)


@dataclass(frozen=True)
class LoweringChoices:
    """What the lowering does differently per target and build."""
    # Keep copy loops as loops (vectorised in place) instead of letting LLVM turn them into memcpy calls:
    # right where the C library's memcpy is scalar (glibc on RISC-V).
    inline_copies: bool = False
    # exp's polynomial in Estrin's form: out-of-order cores (math_expansion.expand_math).
    short_chains: bool = False
    # DWARF line tables from the kernel's source locations, so a fault's code address can be named by its
    # source line (debug compiles).
    line_tables: bool = False
    # exp scales by 2^k with llvm.ldexp, one instruction on AVX-512 (vscalefps); elsewhere LLVM would call
    # the C library's ldexpf element by element (math_expansion.expand_exp).
    ldexp_scaling: bool = False
    # The CPU has fused multiply-add instructions (every RISC-V core with F; x86 from Haswell and Piledriver
    # on): math expansions use them, and multiply and add otherwise (math_expansion.expand_math).
    fused_multiply_add: bool = True
    # Products fuse into the adds that use them (triton's enable_fp_fusion, on a CPU with fused multiply-adds):
    # they are marked `contract` for LLVM (multiply_adds.py).
    contract_products: bool = False
    # The entry point sets the streaming-stores flag (x86 kernels whose launches can write more than the
    # caches keep): store loops into arguments get a streaming version (streaming_stores.py).
    streaming_stores: bool = False
    # 32-bit lanes of the CPU's vpdpbusd (16: AVX512-VNNI, 8: AVX-VNNI, 0: none): sums of byte products run
    # on it (byte_dots.py).
    byte_dot_lanes: int = 0

    @classmethod
    def for_target(cls, triple: str, debug: bool = False, cpu: str = "", features: str = "",
                   streaming_stores: bool = False, fp_fusion: bool = True) -> "LoweringChoices":
        from ..targets import byte_dot_lanes, cpu_features, has_fused_multiply_add
        riscv = triple.startswith("riscv")
        avx512 = not riscv and "+avx512f" in cpu_features(triple, cpu, features)
        fma = has_fused_multiply_add(triple, cpu, features)
        return cls(inline_copies=riscv, short_chains=not riscv, line_tables=debug, ldexp_scaling=avx512,
                   fused_multiply_add=fma, contract_products=fp_fusion and fma,
                   streaming_stores=streaming_stores and triple.startswith("x86_64"),
                   byte_dot_lanes=byte_dot_lanes(triple, cpu, features))


def _set_function_attributes(module, choices: LoweringChoices) -> None:
    """LLVM function attributes on the kernel (`passthrough`): `no-builtins` where copy loops must stay loops,
    `noinline` with line tables (code inlined into the entry point, which has no debug information, would
    lose its source lines).

        func.func @k(...)   becomes   func.func @k(...) attributes {passthrough = ["no-builtins"]}"""
    from mlir import ir
    passthrough = ((['"no-builtins"'] if choices.inline_copies else [])
                   + (['"noinline"'] if choices.line_tables else []))
    for op in module.body.operations:
        if op.operation.name == "func.func" and not op.is_external:
            op.attributes["passthrough"] = ir.Attribute.parse(f"[{', '.join(passthrough)}]")


def _needs_function_attributes(module, choices) -> bool:
    """for copy-inlining targets and line tables"""
    return choices.inline_copies or choices.line_tables


def _has_bf16(module, choices) -> bool:
    """for modules with bf16 values"""
    from mlir import ir
    bf16 = ir.BF16Type.get()

    def element(ty):
        return ty.element_type if isinstance(ty, ir.ShapedType) else ty

    def defines_bf16(op) -> bool:
        values = list(op.results) + [a for region in op.regions for block in region.blocks for a in block.arguments]
        return any(element(value.type) == bf16 for value in values)
    return bool(collect_ops(module, defines_bf16))


def _has_op(name: str, doc: str) -> Callable:
    def present(module, choices) -> bool:
        return bool(collect_ops(module, lambda op: op.name == name))
    present.__doc__ = doc
    return present


def _has_boolean_buffers(module, choices) -> bool:
    """for buffers of booleans"""
    return has_boolean_buffers(module)


def _with_line_tables(module, choices) -> bool:
    """for debug compiles (line tables)"""
    return choices.line_tables


def _contracts(module, choices) -> bool:
    """for kernels whose products may fuse, on CPUs with fused multiply-adds"""
    return choices.contract_products


def _streams(module, choices) -> bool:
    """for x86 kernels whose launches may stream their stores"""
    return choices.streaming_stores


def _has_byte_dots(module, choices) -> bool:
    """for x86 CPUs with vpdpbusd (AVX512-VNNI, AVX-VNNI)"""
    return choices.byte_dot_lanes > 0


def _byte_dots(module, choices):
    return byte_dots_on_vnni(module, choices.byte_dot_lanes)


def _to_llvm_dialect(module, choices) -> None:
    """TO_LLVM; with the OpenMP dialect's conversion where smt.parallel loops became omp ops."""
    has_openmp = bool(collect_ops(module, lambda op: op.name.startswith("omp.")))
    run_upstream(module, parallel_loops.with_openmp(TO_LLVM) if has_openmp else TO_LLVM)


def _expand_math(module, choices) -> None:
    expand_math(module, choices.short_chains, choices.ldexp_scaling, choices.fused_multiply_add)


def _on_module(rewrite: Callable) -> Callable:
    """A rewrite that takes only the module, as a pass's rewrite(module, choices); what it says when it gives
    up (a string) is the pass's outcome, any other result is the rewrite's own."""
    def run(module, choices):
        note = rewrite(module)
        return note if isinstance(note, str) else None
    run.__doc__ = rewrite.__doc__
    return run


# The llir stage: linalg on tensors to the LLVM dialect. The order matters where a pass reads what another
# left: buffers are placed before deallocation is inserted; the reads and stores that go in place need the
# buffers and copies that bufferization made, before the loops are formed; edge tiles are recognised as
# branches before the loops and rewritten after; loops are joined before their reductions and bounds are
# rewritten, and math is expanded in the joined loops.
LLIR_PIPELINE = (
    Pass("function-attributes", "LLVM attributes on the kernel: no-builtins, noinline (passthrough)",
         _set_function_attributes, _needs_function_attributes),
    Pass("fuse-elementwise", "elementwise ops become linalg.generic, producers fused into consumers",
         upstream(FUSE_ELEMENTWISE)),
    Pass("update-carried-tiles-in-place", "an elementwise update of a loop's carried tile writes into it "
         "(carried_tiles.py)", _on_module(update_carried_tiles_in_place)),
    Pass("bufferize", "one-shot bufferization", upstream(BUFFERIZE)),
    Pass("smt-parallel-loops", "smt.parallel loops become scf.parallel (parallel_loops.py)",
         _on_module(parallel_loops.to_parallel)),
    Pass("hoist-buffers", "buffers allocated in loops move out of them", upstream(HOIST)),
    Pass("small-tiles-on-stack", "small allocations outside loops become allocas at their function's entry (buffer_placement.py)",
         _on_module(small_tiles_on_stack)),
    Pass("deallocate", "deallocation of the remaining heap buffers", upstream(DEALLOCATE)),
    Pass("expand-compare-and-swap", "atomic compare-and-swap calls become generic atomic RMWs "
         "(atomic_expansion.py)", _on_module(expand_compare_and_swap)),
    Pass("copies-to-linalg", "memref.copy becomes linalg.copy (buffer_placement.py)", _on_module(copies_to_linalg)),
    Pass("stores-in-place", "a masked store's computation writes into the destination's window "
         "(stores_in_place.py)", _on_module(stores_in_place)),
    Pass("written-edge-tiles", "edge tiles copied from arguments the kernel writes become edge-tile branches "
         "where nothing writes memory before their last read (written_tiles.py)",
         _on_module(read_written_tiles_as_edge_tiles)),
    Pass("read-windows-in-place", "read-only arguments are read in place, not copied (window_reads.py)",
         _on_module(read_windows_in_place)),
    Pass("carried-products-into-destination", "a loop's last matrix-unit product adds into its destination, "
         "not into the accumulator copied there (carried_products.py)",
         _on_module(carried_products_into_destination)),
    Pass("products-into-destination", "matrix products accumulate in the destination (products_into_destination.py)",
         _on_module(store_products_in_place)),
    Pass("share-packed-panels", "a matrix product's B is packed once per launch on each thread where no "
         "program writes it (shared_panels.py)", _on_module(share_packed_panels)),
    Pass("split-tile-branches", "a branch yielding several independent tiles becomes one per tile "
         "(tile_branches.py)", _on_module(split_tile_branches)),
    Pass("mark-edge-tiles", "the branches that copy an edge tile are marked (edge_tile_reads.py)",
         _on_module(mark_edge_tiles)),
    Pass("byte-dots-on-vnni", "sums of byte products run on vpdpbusd (byte_dots.py)", _byte_dots,
         _has_byte_dots),
    Pass("to-loops", "linalg to loops; math ops upstream expands", upstream(TO_LOOPS)),
    Pass("read-edge-tiles-in-place", "reads of marked edge tiles go to the argument or the fill value "
         "(edge_tile_reads.py)", _on_module(read_edge_tiles_in_place)),
    Pass("fuse-adjacent-loops", "a loop reading what the loop before it wrote joins it (loop_fusion.py)",
         _on_module(fuse_adjacent_loops)),
    Pass("reduce-without-nans", "max/min reductions counting NaNs, the exact loop only for them "
         "(number_reductions.py)", _on_module(reduce_without_nans)),
    Pass("split-loops-at-bounds", "loops split where a comparison with their index changes "
         "(loop_splitting.py)", _on_module(split_loops_at_bounds)),
    Pass("drop-unread-stores", "stores into local buffers at lanes no load reads are dropped, and loads of "
         "what the same iteration stored take the value (unread_stores.py)", _on_module(drop_unread_stores)),
    Pass("recompute-tiles", "a tile whose every read can compute it again from read-only memory is recomputed "
         "there, and its buffer goes (recomputed_tiles.py)", _on_module(recompute_tiles)),
    Pass("expand-math", "f32 exp, log, erf, tanh, sin, cos, pow as polynomials (math_expansion.py)", _expand_math),
    Pass("bf16-as-integers", "bf16 arithmetic in f32, conversions as integer ops", upstream(BF16_TO_INTEGER_OPS),
         _has_bf16),
    Pass("contract-multiply-adds", "a product used only by an add is marked `contract`, so that LLVM fuses "
         "the two (multiply_adds.py)", _on_module(contract_multiply_adds), _contracts),
    Pass("streaming-stores", "store loops into arguments get a streaming version: non-temporal vector stores "
         "when the launch writes more than the caches keep (streaming_stores.py)", _on_module(stream_stores), _streams),
    Pass("scf-to-openmp", "scf.parallel loops become OpenMP dialect loops", upstream(parallel_loops.TO_OPENMP),
         _has_op("scf.parallel", "for smt.parallel loops")),
    Pass("inline-alloca-scopes", "the OpenMP loops' alloca scopes become stack save/restore (parallel_loops.py)",
         _on_module(parallel_loops.inline_alloca_scopes), _has_op("memref.alloca_scope", "for alloca scopes")),
    Pass("booleans-as-bytes", "boolean buffers hold a byte per element (boolean_buffers.py)",
         _on_module(booleans_as_bytes), _has_boolean_buffers),
    Pass("to-llvm-dialect", f"to the LLVM dialect: {TO_LLVM} (with convert-openmp-to-llvm for OpenMP loops)",
         _to_llvm_dialect),
    Pass("line-tables", "DWARF line tables from the source locations", upstream(LINE_TABLES), _with_line_tables),
)


def lower(linalg_text: str, choices: LoweringChoices = LoweringChoices()) -> str:
    """The module's LLVM IR after LLIR_PIPELINE."""
    return lower_with_record(linalg_text, choices)[0]


def lower_with_record(linalg_text: str, choices: LoweringChoices, dump: Callable | None = None):
    """(the module's LLVM IR after LLIR_PIPELINE, what each pass did); `dump` as run_pipeline takes it."""
    from mlir import ir
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(linalg_text)
        record = run_pipeline(module, LLIR_PIPELINE, choices, dump)
        return to_llvm_ir(module), record


def main(argv=None) -> int:
    from .passes import main as pipeline_main
    return pipeline_main(LLIR_PIPELINE, LoweringChoices.for_target, argv, prog="python -m spine.compiler.lower")


if __name__ == "__main__":
    import sys
    sys.exit(main())
