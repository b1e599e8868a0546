"""Rewrites of the kernel's TTIR before conversion, on reserved smt calls only (smt_calls.py):

1. A view of a loaded block reads only the view (spine-triton's kernels load a whole block, often inside a
   loop, and view a slice of it per iteration):

       %p = tt.make_tensor_ptr %base, [shape], [strides], [%o0, %o1] : <tensor<128x512xf32>>
       %l = tt.load %p {boundaryCheck = [0, 1], padding = zero}
       %s = tt.call @"...slice2d..."(%l, %row, %col) -> tensor<128x256xf32>
     becomes
       %q = tt.make_tensor_ptr %base, [shape], [strides], [%o0 + %row', %o1 + %col'] : <tensor<128x256xf32>>
       %s = tt.load %q {boundaryCheck = [0, 1], padding = zero}

   with %row', %col' clamped as slice2d clamps them (smt_views.py). Elements the load pads are padded
   the same way in the smaller block, so the values are the same. Advances between the pointer and the
   load are replayed on the smaller pointer. Only when the loaded block has no other use.

2. `acc + smt.dot(a, b)` (`acc += smt.dot(a, b)`, an addf or addi whose operand is the dot's only use)
   becomes one call, `dot_acc(a, b, acc)`: the product is added to acc as it is written back, in the wider
   sum type, and rounded once.
"""
from __future__ import annotations

from mlir import ir
from mlir.dialects import arith

from .smt_calls import RESERVED_PREFIX, kind_of

DOT_ACC = RESERVED_PREFIX + "reference.dot_acc"


def rewrite(module: ir.Module) -> None:
    for call in _calls(module, "slice2d"):
        _load_only_the_slice(call)
    for call in _calls(module, "dot"):
        _fuse_accumulation(call)


def _calls(module: ir.Module, kind: str) -> list:
    found = []

    def visit(op):
        if op.name == "tt.call" and kind_of(op) == kind:
            found.append(op)
        return ir.WalkResult.ADVANCE
    module.operation.walk(visit)
    return found


def _owner(value: ir.Value):
    owner = value.owner
    return owner if isinstance(owner, ir.Operation) else getattr(owner, "operation", None)


def _single_user(value: ir.Value):
    uses = list(value.uses)
    return uses[0].owner if len(uses) == 1 else None


# --------------------------------------------------------------------------------- loads of a view only

def _pointer_chain(load):
    """The tt.make_tensor_ptr a load's pointer comes from and the tt.advance ops in between, or None."""
    advances = []
    op = _owner(load.operands[0])
    while op is not None and op.name == "tt.advance":
        advances.append(op)
        op = _owner(op.operands[0])
    if op is None or op.name != "tt.make_tensor_ptr":
        return None
    return op, list(reversed(advances))


def _load_only_the_slice(call) -> None:
    load = _owner(call.operands[0])
    if load is None or load.name != "tt.load" or _single_user(load.results[0]) is None:
        return
    chain = _pointer_chain(load)
    if chain is None or not _nothing_written_between(load, call):
        return
    make_ptr, advances = chain
    block = ir.RankedTensorType(load.results[0].type)
    sliced = ir.RankedTensorType(call.results[0].type)
    pointer_type = ir.Type.parse(f"!tt.ptr<{sliced}>")
    # At the view, where its offsets are known; the pointer's operands dominate the load before it.
    with call.location, ir.InsertionPoint(call):
        offsets = [arith.AddIOp(make_ptr.operands[1 + 2 * len(block.shape) + d],
                                _clamp(operand, block.shape[d] - sliced.shape[d])).result
                   for d, operand in enumerate(list(call.operands)[1:3])]
        pointer = make_ptr.clone()
        for d, offset in enumerate(offsets):
            pointer.operands[1 + 2 * len(block.shape) + d] = offset
        pointer.results[0].set_type(pointer_type)
        for advance in advances:
            step = advance.clone()
            step.operands[0] = pointer.results[0]
            step.results[0].set_type(pointer_type)
            pointer = step
        part = load.clone()
        part.operands[0] = pointer.results[0]
        part.results[0].set_type(sliced)
    call.results[0].replace_all_uses_with(part.results[0])
    call.erase()
    load.erase()


def _nothing_written_between(load, call) -> bool:
    """Whether moving the load down to the view keeps what it reads: both in one block, and nothing that
    may write memory (a store, an atomic, a call other than a reserved one, a region) between them."""
    if load.parent != call.parent or load.block != call.block:
        return False
    ops = list(load.block.operations)
    start = next(i for i, o in enumerate(ops) if o.operation == load)
    for other in ops[start + 1:]:
        other = other.operation
        if other == call:
            return True
        if other.regions or other.name in WRITES or (other.name == "tt.call" and kind_of(other) is None):
            return False
    return False


WRITES = ("tt.store", "tt.atomic_rmw", "tt.atomic_cas")


def _clamp(offset: ir.Value, highest: int) -> ir.Value:
    zero = arith.ConstantOp(offset.type, 0).result
    top = arith.ConstantOp(offset.type, highest).result
    return arith.MinSIOp(arith.MaxSIOp(offset, zero).result, top).result


# --------------------------------------------------------------------------------- acc += smt.dot(a, b)

def _fuse_accumulation(call) -> None:
    add = _single_user(call.results[0])
    if add is None or add.name not in ("arith.addf", "arith.addi"):
        return
    operands = list(add.operands)
    if operands[0] == operands[1]:
        return
    acc = operands[1] if operands[0] == call.results[0] else operands[0]
    attributes = {"callee": ir.FlatSymbolRefAttr.get(DOT_ACC)}
    try:
        attributes["smt.microkernel"] = call.attributes["smt.microkernel"]
    except KeyError:
        pass
    fused = ir.Operation.create("tt.call", results=[add.results[0].type],
                                operands=[call.operands[0], call.operands[1], acc], attributes=attributes,
                                loc=add.location, ip=ir.InsertionPoint(add))
    add.results[0].replace_all_uses_with(fused.results[0])
    add.erase()
    call.erase()
