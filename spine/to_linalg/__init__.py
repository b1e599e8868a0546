"""Stage `linalg`: TTIR (generic text) → upstream linalg/tensor/memref/scf/arith MLIR.

Where each TTIR op is handled:
    tt.func, tt.return, tt.get_program_id, tt.get_num_programs   function.py
    tt.make_range, tt.splat, tt.broadcast, tt.expand_dims,
    tt.trans, tt.reshape, tt.join, tt.split, tt.cat              tensor_ops.py
    tt.gather, tt.histogram                                      indexing.py
    tt.dot                                                       dot.py (packed: smt_dot.py)
    tt.dot_scaled (microscaled fp8/fp4 operands)                 dot_scaled.py (then dot.py)
    tt.addptr, tt.bitcast                                        pointers.py
    tt.make_tensor_ptr, tt.advance (block pointers)              block_pointers.py
    tt.load / tt.store                                           load.py (tile copies: tile_copy.py; the
                                                                 next program's tile prefetched:
                                                                 prefetch.py) / store.py
    tt.reduce                                                    reduce.py
    tt.scan                                                      scan.py
    tt.atomic_rmw, tt.atomic_cas                                 atomics.py
    scf.for, scf.if, scf.while                                   control_flow.py
    cf.br, cf.cond_br (early returns), scf.execute_region        branches.py (then lifted into scf)
    tt.extern_elementwise (libdevice)                            extern.py (expansions: directed_rounding.py,
                                                                 special_functions.py, bit_ops.py)
    tt.print, tt.assert, llvm.intr.assume (a hint: nothing)      debug_ops.py
    proton.record (profiler scopes in kernels)                   proton_record.py
    arith.*, math.*                                              arith.py (selects between pointers:
                                                                 pointer_select.py)
    tt.clampf, tt.precise_divf, tt.precise_sqrt                  float_ops.py
    tt.call of device functions: inlined first                   calls.py
    fp8 types: bytes, conversions decoded/encoded first          fp8.py
    tt.call of the smt extension's reserved functions            smt_calls.py: views smt_views.py,
                                                                 dot smt_dot.py (micro-kernel
                                                                 smt_microkernel.py), alloc smt_scratch.py;
                                                                 TTIR rewrites first: smt_rewrites.py
The structure these handlers track (pointer, index and mask states) is in states.py.
With debug=True, load.py, store.py and atomics.py check every access against its argument's extent
first (bounds.py).
"""
from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from ..microkernels import MICROKERNELS
from ..errors import SpineCompilationError
from ..ir_names import MICROKERNEL_ATTRIBUTE, NO_FP_FUSION_ATTRIBUTE, PREFETCH_ATTRIBUTE
# Importing the handler modules registers them.
from . import (arith, atomics, block_pointers, control_flow, debug_ops, dot, dot_scaled, extern,  # noqa: F401
               function, indexing, load, pointers, reduce, scan, store, tensor_ops)
from . import branches, calls, float_ops, fp8, proton_record  # noqa: F401
from . import smt_calls, smt_dot, smt_rewrites, smt_scratch, smt_views  # noqa: F401
from .bounds import BoundsCheck, extent_kinds
from .working_set import largest_tile_bytes
from .converter import Converter, RetryWithGather

MAX_RETRIES = 16


@dataclass(frozen=True)
class LinalgKernel:
    text: str                      # the converted module
    name: str
    arg_kinds: tuple               # per runtime argument: "ptr" or its scalar MLIR type (then, when
                                   # bounds-checked, one extent per pointer argument: bounds.py)
    written_args: tuple            # indexes of pointer arguments the kernel may store through
    argument_views: tuple          # runtime-argument index of each extra memref argument, in order
    direct_load_args: tuple        # pointer arguments read in place (see convert_ttir)
    bounds_checked: bool = False   # every access checked against its argument's extent (bounds.py)
    stored_bytes_per_program: int = 0  # a lower bound (store.bytes_stored_per_program)
    largest_tile_bytes: int = 0        # the largest tensor the kernel computes (device_shape.py)
    integer_addresses: bool = False    # it dereferences pointers made from integers (pointers.py)
    address_args: tuple = ()           # the arguments those integers come from (KernelFacts.address_args)
    matrix_units: tuple = ()           # the matrix-unit kernels its products run on (smt_dot.py), by name


def new_context() -> ir.Context:
    ctx = ir.Context()
    ctx.allow_unregistered_dialects = True
    return ctx


def _kernel_function(module: ir.Module):
    # The smt extension's reserved functions are only called, never converted (smt_calls.py).
    funcs = [op for op in module.body.operations
             if op.operation.name == "tt.func" and not smt_calls.is_reserved_function(op)]
    if len(funcs) != 1:
        raise SpineCompilationError(f"expected one kernel function after inlining, found {len(funcs)}")
    return funcs[0]


def _microkernel(module: ir.Module):
    """The packed-matmul micro-kernel the pipeline chose for the target (spine/microkernels.py), or
    None when the TTIR does not name one (tt.dot then stays generic loops)."""
    attributes = module.operation.attributes
    if MICROKERNEL_ATTRIBUTE not in attributes:
        return None
    name = ir.StringAttr(attributes[MICROKERNEL_ATTRIBUTE]).value
    if name not in MICROKERNELS:
        raise SpineCompilationError(f"unknown micro-kernel {name!r} in {MICROKERNEL_ATTRIBUTE}")
    return MICROKERNELS[name]


def _convert_once(tt_func, name: str, direct_load_args: frozenset, bounds_check: bool, microkernel,
                  prefetch: bool, fp_fusion: bool) -> tuple:
    forced = frozenset()
    for _ in range(MAX_RETRIES):
        out = ir.Module.create()
        conv = Converter(name, forced_gather=forced, module=out, direct_load_args=direct_load_args,
                         bounds=BoundsCheck() if bounds_check else None, microkernel=microkernel,
                         prefetch_next_program=prefetch, fp_fusion=fp_fusion)
        try:
            with ir.InsertionPoint(out.body):
                function.convert_function(conv, tt_func)
        except RetryWithGather as retry:
            forced = forced | {retry.key}
            continue
        return out, conv
    raise SpineCompilationError(f"kernel '{name}': loop-carried pointers did not settle")


def convert_ttir(generic_ttir: str, direct_loads: bool = False, bounds_check: bool = False) -> LinalgKernel:
    """`direct_loads`: loads from pointer arguments the kernel never writes read the argument's memory
    in place instead of copying a tile first. Only valid while those arguments do not overlap memory
    the kernel writes through other arguments; the launcher checks that (see driver/launcher.py).
    `bounds_check`: every load, store and atomic is checked against its argument's extent, which the
    launcher passes after the kernel's own arguments (bounds.py)."""
    with new_context(), ir.Location.unknown():
        source = ir.Module.parse(generic_ttir)
        calls.inline_calls(source)
        fp8.rewrite(source)
        smt_rewrites.rewrite(source)
        tt_func = _kernel_function(source)
        name = ir.StringAttr(tt_func.attributes["sym_name"]).value
        _, kinds = function.kernel_signature(tt_func)
        microkernel = _microkernel(source)
        prefetch = PREFETCH_ATTRIBUTE in source.operation.attributes
        fp_fusion = NO_FP_FUSION_ATTRIBUTE not in source.operation.attributes
        out, conv = _convert_once(tt_func, name, frozenset(), bounds_check, microkernel, prefetch, fp_fusion)
        direct = frozenset()
        if direct_loads:
            # The first conversion found which arguments are written; loads from the others go direct.
            direct = frozenset(i for i, kind in enumerate(kinds) if kind == "ptr") - conv.written_args
            if direct:
                out, conv = _convert_once(tt_func, name, direct, bounds_check, microkernel, prefetch, fp_fusion)
        try:
            out.operation.verify()
        except ir.MLIRError as err:
            raise SpineCompilationError(f"kernel '{name}' converts to invalid IR (an access outside its "
                                        f"arguments?): {err}") from None
        views = tuple(index for index, _ in conv.argument_views)
        if bounds_check:
            kinds = kinds + extent_kinds(kinds)
        return LinalgKernel(out.operation.get_asm(enable_debug_info=True), name, tuple(kinds),
                            tuple(sorted(conv.written_args)), views, tuple(sorted(direct)), bounds_check,
                            store.bytes_stored_per_program(tt_func), largest_tile_bytes(tt_func),
                            conv.integer_addresses, tuple(sorted(conv.address_args)),
                            tuple(sorted(conv.matrix_units)))
