"""maxnum and minnum reductions: a loop that propagates NaN first, and the exact loop only when it met one.

tl.max and tl.min reduce with arith.maxnumf / arith.minnumf, which skip NaN operands. LLVM vectorises such
a loop only with a test for NaN in every vector iteration, and leaves its remainder to a scalar loop whose
every step tests for NaN again: a row softmax over 1000 columns spent a tenth of its time in the 40 scalar
steps after its vector loop. arith.maximumf, which propagates NaN, is an ordinary vector reduction for
LLVM, remainder included (on x86 a max, a compare and a masked move a vector). Where no value is NaN the two
agree (up to the sign of a zero result, which maxnum leaves open too); where one is, the maximum is NaN,
and the loop as it was runs again from the initial value:

    scf.for %i {                                    %init = load %acc[...]
      %a = memref.load %acc[...]                    scf.for %i { ... %m = arith.maximumf %a, %x ... }
      %m = arith.maxnumf %a, %x          =>         scf.if (load %acc[...] is NaN) {
      memref.store %m, %acc[...]                      store %init, %acc[...]; the loop as it was
    }                                               }

Running the loop twice is sound only when it does nothing else: its one write is the accumulator's.

Softmax over 1000 columns: see bench/RESULTS.md.
"""
from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, memref, scf

from .ir_walk import collect_ops, defined_outside, defining_op, inside

# each combining operation, and the one that propagates NaN in its place
_PROPAGATING = {"arith.maxnumf": arith.MaximumFOp, "arith.minnumf": arith.MinimumFOp}


def reduce_without_nans(module) -> None:
    for combine in collect_ops(module, lambda op: op.name in _PROPAGATING):
        found = _reduction(combine)
        if found is not None:
            _rewrite(combine, *found)


def _reduction(combine):
    """(loop, the accumulator's load) when `combine` folds a value into an accumulator that its innermost
    loop keeps in memory and writes nothing else; else None."""
    loop = combine.parent
    if loop is None or loop.name != "scf.for" or len(loop.results):
        return None
    for operand in combine.operands:
        load = defining_op(operand)
        if load is None or load.name != "memref.load" or load.parent != loop:
            continue
        stores = [use.owner for use in combine.results[0].uses]
        if len(stores) != 1 or stores[0].name != "memref.store" or stores[0].parent != loop:
            continue
        store = stores[0]
        if list(store.operands)[1:] != list(load.operands) or len(list(combine.results[0].uses)) != 1:
            continue
        if not all(defined_outside(v, loop) for v in load.operands):
            continue
        if _writes_only(loop, store) and _only_accesses(load.operands[0], loop, (load, store)):
            return loop, load
    return None


def _writes_only(loop, store) -> bool:
    """Whether `store` is the only operation in `loop` that may write memory or have other effects a second
    run of the loop would repeat."""
    reads = ("memref.load", "memref.subview", "memref.reinterpret_cast", "memref.cast", "memref.dim")
    for op in collect_ops(loop, lambda op: op != loop):
        if op == store or op.name in reads or op.name.startswith(("arith.", "math.", "scf.")):
            continue
        return False
    return True


def _only_accesses(buffer, loop, allowed) -> bool:
    return all(use.owner in allowed or not inside(use.owner, loop) for use in buffer.uses)


def _rewrite(combine, loop, load) -> None:
    acc, indices = load.operands[0], list(load.operands)[1:]
    with ir.InsertionPoint(loop), loop.location:
        initial = memref.LoadOp(acc, indices).result
    exact = loop.clone(ip=ir.InsertionPoint(loop))
    exact.move_after(loop)
    with ir.InsertionPoint(combine), combine.location:
        # reassoc: a vector reduction; nsz: either zero may result, as with maxnum
        fast = _PROPAGATING[combine.name](*combine.operands, fastmath=ir.Attribute.parse("#arith.fastmath<reassoc,nsz>"))
    combine.results[0].replace_all_uses_with(fast.result)
    combine.erase()
    with ir.InsertionPoint(exact), loop.location:
        result = memref.LoadOp(acc, indices).result
        branch = scf.IfOp(arith.CmpFOp(arith.CmpFPredicate.UNO, result, result).result)
    with ir.InsertionPoint(branch.then_block):
        memref.StoreOp(initial, acc, indices)
        end = scf.YieldOp([])
    exact.move_before(end)
