"""A post-bufferization rewrite: compare-and-swap calls become memref.generic_atomic_rmw (a CAS loop in LLVM).

The conversion (to_linalg/atomics.py) emits `func.call @spine.atomic_cas.<type>(%buffer, %index, %expected,
%desired)`, because the ownership-based buffer deallocation cannot handle generic_atomic_rmw's region; the
rewrite runs after deallocation:

    %old = func.call @spine.atomic_cas.i32(%buf, %i, %cmp, %val)
      →
    %old = memref.generic_atomic_rmw %buf[%i] : memref<?xi32> {
    ^bb0(%current: i32):
      %eq = arith.cmpi eq, %current, %cmp : i32
      %new = arith.select %eq, %val, %current : i32
      memref.atomic_yield %new : i32
    }
"""
from __future__ import annotations

from ..ir_names import CAS_FUNCTION
from ..ir_walk import collect_ops


def expand_compare_and_swap(module) -> None:
    """Replace every compare-and-swap call, and drop the declarations they called."""
    from mlir import ir
    from mlir.dialects import arith, memref
    calls = collect_ops(module, lambda op: op.name == "func.call" and ir.FlatSymbolRefAttr(
        op.attributes["callee"]).value.startswith(CAS_FUNCTION))
    declarations = collect_ops(module, lambda op: op.name == "func.func" and ir.StringAttr(
        op.attributes["sym_name"]).value.startswith(CAS_FUNCTION))
    for call in calls:
        base, index, expected, desired = call.operands
        element = call.results[0].type
        with ir.InsertionPoint(call), call.location:
            rmw = memref.GenericAtomicRMWOp(element, base, [index])
            block = rmw.regions[0].blocks.append(element)
            with ir.InsertionPoint(block):
                current = block.arguments[0]
                if isinstance(element, ir.IntegerType):
                    equal = arith.CmpIOp(arith.CmpIPredicate.eq, current, expected).result
                else:
                    equal = arith.CmpFOp(arith.CmpFPredicate.OEQ, current, expected).result
                memref.AtomicYieldOp(arith.SelectOp(equal, desired, current).result)
        call.results[0].replace_all_uses_with(rmw.result)
        call.erase()
    for declaration in declarations:
        declaration.erase()
