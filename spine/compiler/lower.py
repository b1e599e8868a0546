"""Stage `llir`: upstream MLIR passes from linalg on tensors down to the LLVM dialect, then LLVM IR.

Loops come out scalar here; LLVM's loop vectoriser turns them into RVV (or AVX) code in codegen.py.
The MLIR → LLVM IR translation has no Python API, so we call the C API through ctypes."""
from __future__ import annotations

import ctypes
import functools
import os
from dataclasses import dataclass

from ..errors import SpineCompilationError, describe_location
from ..targets import STACK_TILE_BYTES
from .atomic_expansion import expand_compare_and_swap
from .edge_tile_reads import mark_edge_tiles, read_edge_tiles_in_place
from ..ir_walk import collect_ops, defining_op, offsets_sizes_strides
from .loop_fusion import fuse_adjacent_loops
from .loop_splitting import split_loops_at_bounds
from .math_expansion import expand_math
from .number_reductions import reduce_without_nans
from .products_into_destination import store_products_in_place
from .window_reads import read_windows_in_place
from . import parallel_loops

BUFFERIZE = ",".join([
    # No cse before fusion: it would merge the per-use copies of materialised masks and index tensors
    # into one multi-use producer, which the fusion leaves alone (and bufferizes into a temporary).
    "canonicalize", "convert-elementwise-to-linalg", "linalg-fuse-elementwise-ops", "canonicalize", "cse",
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

    @classmethod
    def for_target(cls, triple: str, debug: bool = False, cpu: str = "", features: str = "") -> "LoweringChoices":
        from ..targets import cpu_features, has_fused_multiply_add
        riscv = triple.startswith("riscv")
        avx512 = not riscv and "+avx512f" in cpu_features(triple, cpu, features)
        return cls(inline_copies=riscv, short_chains=not riscv, line_tables=debug, ldexp_scaling=avx512,
                   fused_multiply_add=has_fused_multiply_add(triple, cpu, features))


def lower(linalg_text: str, choices: LoweringChoices = LoweringChoices()) -> str:
    from mlir import ir
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(linalg_text)
        # Line tables: the kernel stays a function of its own, since code inlined into the entry point
        # (which has no debug information) would lose its source lines.
        passthrough = ((['"no-builtins"'] if choices.inline_copies else [])
                       + (['"noinline"'] if choices.line_tables else []))
        if passthrough:
            for op in module.body.operations:
                if op.operation.name == "func.func" and not op.is_external:
                    op.attributes["passthrough"] = ir.Attribute.parse(f"[{', '.join(passthrough)}]")
        _run(module, BUFFERIZE)
        parallel = parallel_loops.to_parallel(module)
        _run(module, HOIST)
        _small_tiles_on_stack(module)
        _run(module, DEALLOCATE)
        expand_compare_and_swap(module)
        _copies_to_linalg(module)
        _stores_in_place(module)
        read_windows_in_place(module)   # the windows _stores_in_place's computations read
        store_products_in_place(module)
        mark_edge_tiles(module)
        _run(module, TO_LOOPS)
        read_edge_tiles_in_place(module)
        fuse_adjacent_loops(module)
        reduce_without_nans(module)
        split_loops_at_bounds(module)
        expand_math(module, choices.short_chains, choices.ldexp_scaling, choices.fused_multiply_add)
        if "bf16" in linalg_text:
            _run(module, BF16_TO_INTEGER_OPS)
        if parallel:
            _run(module, parallel_loops.TO_OPENMP)
            parallel_loops.inline_alloca_scopes(module)
        _run(module, parallel_loops.with_openmp(TO_LLVM) if parallel else TO_LLVM)
        if choices.line_tables:
            _run(module, LINE_TABLES)
        llvm_ir = to_llvm_ir(module)
        return with_bf16_truncation(parallel_loops.rename_runtime_calls(llvm_ir) if parallel else llvm_ir)


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


def with_bf16_truncation(llvm_ir: str) -> str:
    if "bfloat" not in llvm_ir or "@__truncsfbf2(" in llvm_ir or "@llvm.compiler.used" in llvm_ir:
        return llvm_ir
    return llvm_ir + BF16_TRUNCATION


def _run(module, pipeline: str) -> None:
    from mlir import ir, passmanager
    try:
        passmanager.PassManager.parse(f"builtin.module({pipeline})").run(module.operation)
    except ir.MLIRError as err:
        lines = []
        for diag in err.error_diagnostics:
            lines.append(f"{describe_location(diag.location)}: {diag.message}")
            lines += [f"  note: {note.message}" for note in diag.notes]
        raise SpineCompilationError("MLIR lowering failed:\n" + "\n".join(lines)) from None


def _small_tiles_on_stack(module) -> None:
    """Static allocations of at most STACK_TILE_BYTES in a function's top-level block become allocas: no
    malloc per program instance. Upstream's promote-buffers-to-stack would also promote allocations inside
    loops, where every iteration would grow the stack; hoisting already moved the hoistable ones out."""
    from mlir import ir
    from mlir.dialects import memref

    def small_top_level_alloc(op) -> bool:
        if op.name != "memref.alloc" or op.parent.name != "func.func":
            return False
        ty = ir.MemRefType(op.results[0].type)
        width = getattr(ty.element_type, "width", 64)
        count = 1
        for n in (ty.shape if ty.has_static_shape else [1 << 62]):
            count *= n
        return count * width <= STACK_TILE_BYTES * 8
    for op in collect_ops(module, small_top_level_alloc):
        with ir.InsertionPoint(op), op.location:
            alloca = memref.AllocaOp(op.results[0].type, [], [], alignment=op.attributes["alignment"]
                                     if "alignment" in op.attributes else None)
        op.results[0].replace_all_uses_with(alloca.result)
        op.erase()


def _is_bool_memref(ty) -> bool:
    from mlir import ir
    elem = ir.MemRefType(ty).element_type
    return isinstance(elem, ir.IntegerType) and elem.width == 1


def _copies_to_linalg(module) -> None:
    """memref.copy of strided memrefs lowers to a call into MLIR's C runner library (`memrefCopy`); as a
    linalg.copy it becomes a plain loop and the kernel .so stays self-contained."""
    from mlir import ir
    from mlir.dialects import linalg

    def copy(op) -> bool:
        if op.name in ("memref.alloc", "memref.alloca") and _is_bool_memref(op.results[0].type):
            # MLIR's memref lowering asserts (aborting the process) on stores to i1 buffers.
            raise SpineCompilationError(
                f"unsupported: a boolean tensor kept in memory (at {describe_location(op.location)}); "
                "convert it to int8 first")
        return op.name == "memref.copy"
    for op in collect_ops(module, copy):
        with ir.InsertionPoint(op), op.location:
            linalg.copy(op.operands[0], outs=[op.operands[1]])
        op.erase()


def _stores_in_place(module) -> None:
    """A masked store bufferizes into: compute the tile into a local buffer, then copy its window out.

        linalg.generic ins(%a, %b) outs(%buf)              (writes every element, reads none of %buf)
        linalg.copy ins(subview %buf[0][%n]) outs(%dest)

    The generic computes just the window instead, straight into the destination, and the copy (a memcpy
    the size of the tile, a third of a vector add's time) goes:

        linalg.generic ins(subview %a[0][%n], subview %b[0][%n]) outs(%dest)

    Only elementwise generics qualify (all loops parallel, every map a projection of the loops), so each
    element is computed from inputs at its own index before it is written; and only when nothing reads
    the buffer afterwards."""
    for copy in collect_ops(module, lambda op: op.name == "linalg.copy"):
        match = _tile_written_then_copied(copy)
        if match is not None:
            _compute_window_into_destination(copy, *match)


def _tile_written_then_copied(copy):
    """(generic, output index, window sizes) when `copy` copies a window at 0 of a local buffer that an
    elementwise linalg.generic right before it wrote and nothing reads afterwards; else None."""
    from mlir import ir
    window = defining_op(copy.operands[0])
    if window is None or window.name != "memref.subview":
        return None
    buffer = window.operands[0]
    allocation = defining_op(buffer)
    if getattr(allocation, "name", None) not in ("memref.alloc", "memref.alloca"):
        return None
    if ir.MemRefType(buffer.type).element_type != ir.MemRefType(copy.operands[1].type).element_type:
        return None
    if any(v != 0 for v in ir.DenseI64ArrayAttr(window.attributes["static_offsets"])) or \
            any(v != 1 for v in ir.DenseI64ArrayAttr(window.attributes["static_strides"])):
        return None
    sizes = offsets_sizes_strides(window)[1]
    writer = copy
    while True:
        writer = _previous_op(writer)
        if writer is None:
            return None
        if writer != window and any(operand == buffer for operand in writer.operands):
            break
    if writer.name != "linalg.generic" or writer.block != allocation.block:
        return None     # (a buffer defined outside a loop may be read again in the next iteration)
    generic = writer.opview
    if "reduction" in str(generic.attributes["iterator_types"]):
        return None
    outputs = list(generic.outputs)
    if outputs != [buffer]:     # another output would be computed over the window only
        return None
    index = outputs.index(buffer)
    body = generic.regions[0].blocks[0]
    if list(body.arguments[len(generic.inputs) + index].uses):
        return None
    maps = [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(generic.attributes["indexing_maps"])]
    if not all(m.is_projected_permutation for m in maps) or \
            str(maps[len(generic.inputs) + index]) != str(ir.AffineMap.get_identity(len(sizes))):
        return None
    for use in buffer.uses:
        user = _ancestor_in_block(use.owner.operation, writer.block)
        if user is None or not (user == writer or user == window or user.is_before_in_block(writer)):
            return None
    if any(use.owner.operation != copy for use in window.results[0].uses):
        return None
    return generic, index, sizes


def _ancestor_in_block(op, block):
    while op is not None and op.block != block:
        parent = op.parent
        op = parent.operation if parent is not None and parent.name != "builtin.module" else None
    return op


def _previous_op(op):
    previous = None
    for candidate in op.block.operations:
        if candidate.operation == op:
            return previous
        previous = candidate.operation
    return None


def _compute_window_into_destination(copy, generic, index, sizes) -> None:
    from mlir import ir
    maps = [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(generic.attributes["indexing_maps"])]
    operands = list(generic.inputs) + list(generic.outputs)
    output = len(generic.inputs) + index
    with ir.InsertionPoint(copy), copy.location:
        windows = []
        for i, (operand, affine_map) in enumerate(zip(operands, maps)):
            if i == output:
                windows.append(copy.operands[1])
            elif isinstance(operand.type, ir.MemRefType) and len(affine_map.results):
                dims = [ir.AffineDimExpr(r).position for r in affine_map.results]
                windows.append(_window(operand, [sizes[d] for d in dims]))
            else:
                windows.append(operand)
        windowed = generic.operation.clone(ip=ir.InsertionPoint(copy))
        for i, value in enumerate(windows):
            windowed.operands[i] = value
    generic.operation.erase()
    copy.erase()


def _window(buffer, sizes):
    """subview buffer[0, ...][sizes] with unit steps."""
    from mlir import ir
    from mlir.dialects import memref
    ty = ir.MemRefType(buffer.type)
    strides, offset = ty.get_strides_and_offset()
    dynamic_size = ir.ShapedType.get_dynamic_size()
    static = [n if isinstance(n, int) else dynamic_size for n in sizes]
    result = ir.MemRefType.get(static, ty.element_type, layout=ir.StridedLayoutAttr.get(offset, strides))
    return memref.SubViewOp(
        result, buffer, [], [n for n in sizes if not isinstance(n, int)], [],
        ir.DenseI64ArrayAttr.get([0] * len(sizes)), ir.DenseI64ArrayAttr.get(static),
        ir.DenseI64ArrayAttr.get([1] * len(sizes))).result
