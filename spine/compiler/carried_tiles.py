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

from ..ir_walk import all_parallel, collect_ops, defining_op, yielded


def update_carried_tiles_in_place(module) -> None:
    for op in collect_ops(module, lambda op: op.name == "linalg.generic"):
        generic = op.opview
        found = _carried_input(generic)
        if found is None:
            continue
        carried, replaced = found
        generic.operands[len(generic.operands) - 1] = carried
        for copy in replaced:
            copy.results[0].replace_all_uses_with(generic.results[0])
            copy.erase()


def _carried_input(generic):
    """(the input the generic's output can be, the copies into it that go with the rewrite), as the module
    docstring says, or None."""
    from mlir import ir
    inputs, outputs = list(generic.inputs), list(generic.outputs)
    if len(outputs) != 1 or not all_parallel(generic):
        return None
    empty = defining_op(outputs[0])
    if empty is None or empty.name != "tensor.empty" or list(generic.regions[0].blocks[0].arguments[len(inputs)].uses):
        return None
    maps = [str(m) for m in ir.ArrayAttr(generic.attributes["indexing_maps"])]
    for value, value_map in zip(inputs, maps):
        if value.type == outputs[0].type and value_map == maps[len(inputs)]:
            replaced = _yielded_back(value, generic)
            if replaced is not None:
                return value, replaced
    return None


def _yielded_back(value, generic):
    """The copies that go when `value`, an iteration argument of the scf.for directly around `generic`, becomes
    its output: none when the loop yields the generic's result in the argument's place and nothing else uses
    the argument; the linalg.copy when the loop yields a copy of the result into the argument (what the
    conversion writes, to_linalg/control_flow.py) and only the generic and the copy use it. None (no list)
    when neither holds."""
    from mlir import ir
    if not isinstance(value, ir.BlockArgument) or value.arg_number == 0:
        return None
    block = value.owner
    loop, parent = block.owner.operation, generic.operation.parent
    if loop.name != "scf.for" or parent is None or parent.operation != loop:
        return None
    back, uses = yielded(block, value.arg_number - 1), len(list(value.uses))
    if back == generic.results[0]:
        return [] if uses == 1 else None
    copy = defining_op(back)
    if (copy is None or copy.name != "linalg.copy" or copy.operands[0] != generic.results[0]
            or copy.operands[1] != value or uses != 2 or len(list(generic.results[0].uses)) != 1):
        return None
    return [copy]
