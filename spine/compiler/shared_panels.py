"""A matrix product's B is packed once per launch on each thread where no program writes B's memory.

The packed products (AMX and VNNI: to_linalg/amx_matmul.py, vnni_matmul.py; the FMA kernel on x86 and
RVV: smt_microkernel.py) pack B at every call, and the grid's programs that share a column block of C
pack the same B again: in the tutorial's matmul at 512^3 in 256 x 256 tiles, each B tile twice; packing
took about half of a bf16 call's time on one Sapphire Rapids core. Each such product's function names a
twin (SHARED_PANEL_TWIN) that takes one more argument, an i1: where it holds, B's panel is the calling
thread's for the rest of the launch (cpp/shared_panels.h), found by B's address and strides, and packed
only where no earlier program on the thread packed it. Before, where B is a view of argument %b or the
tile's zero-padded copy at the edges:

    %bt = scf.if %edge -> memref<256x128xi8, ...> { (copy into %local) scf.yield %local }
                                                  else { scf.yield (view of %b) }
    func.call @X(%at, %bt, %acc)

after, when %b is one of the kernel's read-only arguments (read_only.py):

    %keep = arith.xori %edge, true
    func.call @X_shared(%at, %bt, %acc, %keep)

A kept panel is read by later programs, so the memory under it must not change during the launch: only
views of read-only arguments are kept (`true` where B is always one; the branch's condition where one side
of a branch yields the local copy). A call whose B may be anything else keeps its function, and the pass
says how many gave up ("kept no panel for N of M products").
"""
from __future__ import annotations

from typing import Optional

from ..ir_names import SHARED_PANEL_TWIN
from ..ir_walk import collect_ops, defining_op, enclosing_function, erase_uncalled, through_views, yielded
from .read_only import read_only_arguments


def share_packed_panels(module) -> Optional[str]:
    from mlir import ir
    twins = _twins(module)
    if not twins:
        return None                  # no product that could keep its B: nothing to walk
    calls = collect_ops(module, lambda op: op.name == "func.call"
                        and ir.FlatSymbolRefAttr(op.attributes["callee"]).value in twins)
    read_only = {}
    refused = 0
    for call in calls:
        function = enclosing_function(call)
        if function not in read_only:
            read_only[function] = read_only_arguments(function)
        callee = ir.FlatSymbolRefAttr(call.attributes["callee"]).value
        if not _share(call, twins[callee], read_only[function]):
            refused += 1
    erase_uncalled(module, set(twins) | set(twins.values()))
    return f"kept no panel for {refused} of {len(calls)} products (B may be written)" if refused else None


def _twins(module) -> dict:
    """{product function's name: its shared twin's name}"""
    from mlir import ir
    return {ir.StringAttr(op.attributes["sym_name"]).value: ir.StringAttr(op.attributes[SHARED_PANEL_TWIN]).value
            for op in module.body.operations
            if op.operation.name == "func.func" and SHARED_PANEL_TWIN in op.attributes}


def _share(call, twin: str, read_only: set) -> bool:
    """Makes `call` call `twin`, with its condition, where B's memory may be kept; whether it did."""
    from mlir import ir
    from mlir.dialects import func
    with ir.InsertionPoint(call), call.location:
        keep = _keepable(call.operands[1], read_only)
        if keep is None:
            return False
        func.CallOp([], ir.FlatSymbolRefAttr.get(twin), list(call.operands) + [keep])
    call.erase()
    return True


def _keepable(b, read_only: set):
    """An i1 that holds where B is a view of a read-only argument (built at the insertion point), or None
    where it may be other memory."""
    from mlir import ir
    from mlir.dialects import arith
    i1 = ir.IntegerType.get_signless(1)
    root = through_views(b)
    if root in read_only:
        return arith.ConstantOp(i1, 1).result
    branch = defining_op(root)
    if branch is None or branch.name != "scf.if" or len(branch.regions[1].blocks) == 0:
        return None
    index = ir.OpResult(root).result_number
    sides = [through_views(yielded(region.blocks[0], index)) in read_only for region in branch.regions]
    if sides == [True, True]:
        return arith.ConstantOp(i1, 1).result
    if sides == [True, False]:
        return branch.operands[0]
    if sides == [False, True]:
        return arith.XOrIOp(branch.operands[0], arith.ConstantOp(i1, 1).result).result
    return None
