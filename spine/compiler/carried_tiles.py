"""A loop's carried tile updated in place: an elementwise linalg.generic that computes a new value of an
scf.for iteration argument writes into that argument's tensor, not into a fresh one.

`acc += tl.load(...)` in a loop (a sum over row blocks, a running max, attention's rescaled accumulator)
becomes, after elementwise fusion, a generic whose input is the iteration argument and whose output is a
`tensor.empty`: linalg's fusion patterns replace an output the body does not read by an empty tensor
(RemoveOutsDependency). One-shot bufferization then gives the result a buffer of its own, and since the
loop must yield into the argument's buffer, copies it back at the end of every iteration: a tile of
32 x 128 fp32 costs a 16 KiB copy per step, and the dw/db reduction of Triton's layer-norm tutorial made
two of them per step. With the argument as the output, bufferization writes the sums where the argument
is, in place (an elementwise generic may read and write one buffer):

    %r = scf.for ... iter_args(%acc = %init) -> (tensor<32x128xf32>) {
      %e = tensor.empty() : tensor<32x128xf32>
      %s = linalg.generic {maps = [id, id, id], ["parallel", "parallel"]}
             ins(%acc, %x : tensor<32x128xf32>, tensor<32x128xf16>) outs(%e : tensor<32x128xf32>) { ... }
      scf.yield %s : tensor<32x128xf32>
    }
  =>
      %s = linalg.generic {...} ins(%acc, %x : ...) outs(%acc : tensor<32x128xf32>) { ... }

A generic is rewritten when: all its loops are parallel; it has one output, an empty tensor its body does
not read; one of its inputs is an iteration argument of the scf.for around it with the output's type and
indexing map; and the loop yields the generic's result in that argument's place, itself (the argument used
by nothing else) or through a linalg.copy into the argument (what the conversion writes,
to_linalg/control_flow.py; the argument used by nothing else but the copy, which goes). The output's value
was never read, so the rewrite cannot change a result; whether the write goes in place is
still bufferization's decision (it copies where it must)."""
from __future__ import annotations

from ..ir_walk import collect_ops, defining_op


def update_carried_tiles_in_place(module) -> None:
    for generic in collect_ops(module, lambda op: op.name == "linalg.generic"):
        found = _carried_input(generic)
        if found is None:
            continue
        carried, copy = found
        generic.operands[len(generic.operands) - 1] = carried
        if copy is not None:
            copy.results[0].replace_all_uses_with(generic.results[0])
            copy.erase()


def _carried_input(generic):
    """(the input the generic's output can be, the copy into it that goes with the rewrite or None), as the
    module docstring says, or None."""
    from mlir import ir
    inputs, outputs = _operand_counts(generic)
    if outputs != 1 or any("parallel" not in str(t) for t in ir.ArrayAttr(generic.attributes["iterator_types"])):
        return None
    output = generic.operands[inputs]
    empty = defining_op(output)
    body = generic.regions[0].blocks[0]
    if empty is None or empty.name != "tensor.empty" or list(body.arguments[inputs].uses):
        return None
    maps = list(ir.ArrayAttr(generic.attributes["indexing_maps"]))
    for index in range(inputs):
        value = generic.operands[index]
        if value.type == output.type and str(maps[index]) == str(maps[inputs]):
            yielded = _yielded_back(value, generic)
            if yielded is not None:
                return value, yielded or None
    return None


def _yielded_back(value, generic):
    """Whether `value` is an iteration argument of the scf.for directly around `generic` that the loop yields
    the generic's result back into: False when it yields the result itself and nothing else uses the
    argument, the linalg.copy when it yields a copy of the result into the argument (what the conversion
    writes, to_linalg/control_flow.py) and the argument has no other use, None otherwise."""
    from mlir import ir
    if not isinstance(value, ir.BlockArgument) or value.arg_number == 0:
        return None
    block = value.owner
    loop, parent = block.owner.operation, generic.operation.parent
    if loop.name != "scf.for" or parent is None or parent.operation != loop:
        return None
    position = value.arg_number - 1
    yielded = block.operations[len(block.operations) - 1].operands[position]
    users = [use.owner for use in value.uses]
    if yielded == generic.results[0]:
        return False if len(users) == 1 else None
    copy = defining_op(yielded)
    if (copy is None or copy.name != "linalg.copy" or copy.operands[0] != generic.results[0]
            or copy.operands[1] != value or len(users) != 2 or len(list(generic.results[0].uses)) != 1):
        return None
    return copy


def _operand_counts(generic) -> tuple:
    """(inputs, outputs) of a linalg.generic, from its operandSegmentSizes."""
    from mlir import ir
    sizes = ir.DenseI32ArrayAttr(generic.attributes["operandSegmentSizes"])
    return sizes[0], sizes[1]
