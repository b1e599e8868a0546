"""maxnum and minnum reductions: a loop that assumes no NaN while it counts them, and the exact loop only
when it met one.

tl.max and tl.min reduce with arith.maxnumf / arith.minnumf, which skip NaN operands. LLVM vectorises such
a loop only with a test for NaN in every vector iteration, and leaves its remainder to a scalar loop whose
every step tests for NaN again: a row softmax over 1000 columns spent a tenth of its time in the 40 scalar
steps after its vector loop. With `nnan`, maxnum is a plain vector maximum, remainder and final reduction
included; the loop also counts the NaN operands (a compare and an add a vector), and when the count is not
zero the loop as it was runs again from the initial value:

    scf.for %i {                                    %init = load %acc[...]; %nans = (%init is NaN)
      %a = memref.load %acc[...]                    scf.for %i {
      %m = arith.maxnumf %a, %x          =>           ... %m = arith.maxnumf nnan %a, %x ...
      memref.store %m, %acc[...]                      %nans += (%x is NaN)
    }                                               }
                                                    scf.if (%nans != 0) { store %init, %acc[...]; the loop as it was }

`nnan` makes a NaN operand's result poison, a value the program must not depend on: with a NaN the count
is not zero and the exact loop overwrites the accumulator before anything reads it. Running the loop twice
is sound only when it does nothing else: its one write is the accumulator's. The NaN-propagating
arith.maximumf in the fast loop, tried first, left LLVM's NaN-aware final reduction across the lanes (a
dozen dependent steps per row): softmax 1.5 % slower on x86, 6 % more riscv64 instructions.
"""
from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, memref, scf

from ..ir_walk import collect_ops, defined_outside, defining_op, inside, without_effects

_COMBINES = ("arith.maxnumf", "arith.minnumf")


def reduce_without_nans(module) -> None:
    for combine in collect_ops(module, lambda op: op.name in _COMBINES):
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
    for op in collect_ops(loop, lambda op: op != loop):
        if op == store or op.name == "memref.load" or without_effects(op) or op.name.startswith("scf."):
            continue
        return False
    return True


def _only_accesses(buffer, loop, allowed) -> bool:
    return all(use.owner in allowed or not inside(use.owner, loop) for use in buffer.uses)


def _rewrite(combine, loop, load) -> None:
    acc, indices = load.operands[0], list(load.operands)[1:]
    i32 = ir.IntegerType.get_signless(32)
    with ir.InsertionPoint(loop), loop.location:
        initial = memref.LoadOp(acc, indices).result
        nans = memref.AllocaOp(ir.MemRefType.get([], i32), [], []).result
        memref.StoreOp(_is_nan(initial), nans, [])
    exact = loop.clone(ip=ir.InsertionPoint(loop))
    exact.move_after(loop)
    other = combine.operands[1] if combine.operands[0] == load.results[0] else combine.operands[0]
    with ir.InsertionPoint(combine), combine.location:
        # reassoc: a vector reduction; nsz: either zero may result, as with maxnum anyway
        combine.attributes["fastmath"] = ir.Attribute.parse("#arith.fastmath<reassoc,nnan,nsz>")
        memref.StoreOp(arith.AddIOp(memref.LoadOp(nans, []).result, _is_nan(other)).result, nans, [])
    with ir.InsertionPoint(exact), loop.location:
        seen = arith.CmpIOp(arith.CmpIPredicate.ne, memref.LoadOp(nans, []).result, arith.ConstantOp(i32, 0).result)
        branch = scf.IfOp(seen.result)
    with ir.InsertionPoint(branch.then_block):
        memref.StoreOp(initial, acc, indices)
        end = scf.YieldOp([])
    exact.move_before(end)


def _is_nan(value) -> ir.Value:
    """1 (as i32) when `value` is NaN, else 0."""
    i32 = ir.IntegerType.get_signless(32)
    return arith.ExtUIOp(i32, arith.CmpFOp(arith.CmpFPredicate.UNO, value, value).result).result
