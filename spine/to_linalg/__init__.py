"""Stage `linalg`: TTIR (generic text) → upstream linalg/tensor/memref/scf/arith MLIR.

Where each TTIR op is handled:
    tt.func, tt.return, tt.get_program_id, tt.get_num_programs   function.py
    tt.make_range, tt.splat, tt.broadcast, tt.expand_dims,
    tt.trans, tt.reshape, tt.join, tt.split, tt.cat              tensor_ops.py
    tt.gather, tt.histogram                                      indexing.py
    tt.dot                                                       dot.py
    tt.addptr, tt.bitcast                                        pointers.py
    tt.make_tensor_ptr, tt.advance (block pointers)              block_pointers.py
    tt.load / tt.store                                           load.py / store.py
    tt.reduce                                                    reduce.py
    tt.scan                                                      scan.py
    tt.atomic_rmw, tt.atomic_cas                                 atomics.py
    scf.for, scf.if, scf.while                                   control_flow.py
    tt.extern_elementwise (libdevice)                            extern.py
    tt.print, tt.assert                                          debug_ops.py
    arith.*, math.*                                              arith.py
The structure these handlers track (pointer, index and mask states) is in states.py.
"""
from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from ..errors import SpineCompilationError
# Importing the handler modules registers them.
from . import (arith, atomics, block_pointers, control_flow, debug_ops, dot, extern, function,  # noqa: F401
               indexing, load, pointers, reduce, scan, store, tensor_ops)
from .converter import Converter, RetryWithGather

MAX_RETRIES = 16


@dataclass(frozen=True)
class LinalgKernel:
    text: str                      # the converted module
    name: str
    arg_kinds: tuple               # per runtime argument: "ptr" or its scalar MLIR type
    written_args: tuple            # indexes of pointer arguments the kernel may store through
    argument_views: tuple          # runtime-argument index of each extra memref argument, in order


def new_context() -> ir.Context:
    ctx = ir.Context()
    ctx.allow_unregistered_dialects = True
    return ctx


def _kernel_function(module: ir.Module):
    funcs = [op for op in module.body.operations if op.operation.name == "tt.func"]
    if len(funcs) != 1:
        raise SpineCompilationError(f"expected one kernel function after inlining, found {len(funcs)} "
                                    f"(non-inlined device function calls are not supported yet)")
    return funcs[0]


def convert_ttir(generic_ttir: str) -> LinalgKernel:
    with new_context(), ir.Location.unknown():
        source = ir.Module.parse(generic_ttir)
        tt_func = _kernel_function(source)
        name = ir.StringAttr(tt_func.attributes["sym_name"]).value
        _, kinds = function.kernel_signature(tt_func)
        forced = frozenset()
        for _ in range(MAX_RETRIES):
            out = ir.Module.create()
            conv = Converter(name, forced_gather=forced, module=out)
            try:
                with ir.InsertionPoint(out.body):
                    function.convert_function(conv, tt_func)
            except RetryWithGather as retry:
                forced = forced | {retry.key}
                continue
            break
        else:
            raise SpineCompilationError(f"kernel '{name}': loop-carried pointers did not settle")
        if not out.operation.verify():
            raise SpineCompilationError(f"internal: converted kernel '{name}' does not verify")
        views = tuple(index for index, _ in conv.argument_views)
        return LinalgKernel(str(out), name, tuple(kinds), tuple(sorted(conv.written_args)), views)
