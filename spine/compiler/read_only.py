"""Which of a kernel's pointer arguments nothing writes during a launch: those the launcher keeps apart from
every argument the kernel writes (the function's DISJOINT_ARGUMENTS) that no operation of the function
writes through. Rewrites that read such memory at another time than the program would, or keep what they
read for other programs (recomputed_tiles.py, shared_panels.py), take only these.

An operation writes through its memref operands, except where it says which it only reads: a linalg op's
`ins`, memref.copy's source, and the arguments a called function marks READ_ONLY_ARGUMENT (the matrix
products' A and B). Memory reached through LLVM pointers, or a written memref that is not plainly a view of
an argument or of a local buffer (a select or a branch's result may be any argument), leaves none."""
from __future__ import annotations

from ..ir_names import DISJOINT_ARGUMENTS, READ_ONLY_ARGUMENT
from ..ir_walk import collect_ops, defining_op, named, through_views

_WRITES = ("memref.store", "memref.atomic_rmw", "memref.generic_atomic_rmw", "memref.copy", "vector.store",
           "vector.transfer_write", "vector.maskedstore", "vector.scatter")
_LOCAL = ("memref.alloca", "memref.alloc")


def read_only_arguments(function) -> set:
    """The function's arguments (block arguments of its entry) in DISJOINT_ARGUMENTS that nothing writes."""
    from mlir import ir
    if DISJOINT_ARGUMENTS not in function.attributes:
        return set()
    entry = function.regions[0].blocks[0]
    arguments = {entry.arguments[i] for i in ir.DenseI64ArrayAttr(function.attributes[DISJOINT_ARGUMENTS])}
    module = function.parent.regions[0].blocks[0]
    for op in collect_ops(function, may_write):
        if op.name.startswith("llvm."):
            return set()             # memory reached by pointers
        for root in (through_views(v) for v in written_operands(op, module)):
            owner = defining_op(root)
            if owner is None and root.owner == entry:
                arguments.discard(root)
            elif owner is None or owner.name not in _LOCAL:
                return set()
    return arguments


def may_write(op) -> bool:
    return op.name in _WRITES or op.name.startswith(("linalg.", "func.call", "llvm."))


def written_operands(op, module) -> list:
    """The memref operands `op` may write through; `module`: the body (block) of the module around it."""
    from mlir import ir
    operands = [v for v in op.operands if isinstance(v.type, ir.MemRefType)]
    if op.name == "memref.copy":
        return [op.operands[1]]
    if op.name.startswith("linalg.") and "operandSegmentSizes" in op.attributes:
        inputs = ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"])[0]
        return [v for v in list(op.operands)[inputs:] if isinstance(v.type, ir.MemRefType)]
    if op.name == "func.call":
        reads = _read_only_positions(module, ir.FlatSymbolRefAttr(op.attributes["callee"]).value)
        return [v for i, v in enumerate(op.operands) if isinstance(v.type, ir.MemRefType) and i not in reads]
    return operands


def _read_only_positions(module, name: str) -> set:
    """The positions of the arguments function @name marks READ_ONLY_ARGUMENT."""
    from mlir import ir
    function = named(module, name)
    if function is None or "arg_attrs" not in function.attributes:
        return set()
    return {i for i, attrs in enumerate(ir.ArrayAttr(function.attributes["arg_attrs"]))
            if READ_ONLY_ARGUMENT in ir.DictAttr(attrs)}
