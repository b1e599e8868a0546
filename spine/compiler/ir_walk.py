"""Finding the operations a rewrite applies to: collected in one walk first, then rewritten, since MLIR's
walk must not meet operations its callback erased or replaced; and reading the views they take."""
from __future__ import annotations

from typing import Callable


def collect_ops(module, wanted: Callable) -> list:
    """Every operation of `module` (as `ir.Operation`, in walk order) for which `wanted(operation)` is true."""
    from mlir import ir
    found = []

    def visit(op):
        if wanted(op.operation):
            found.append(op.operation)
        return ir.WalkResult.ADVANCE
    module.operation.walk(visit)
    return found


def defining_op(value):
    """The operation that defines `value`, or None for a block argument."""
    from mlir import ir
    owner = value.owner
    return None if isinstance(owner, ir.Block) else owner.operation


def constant_int(value):
    """The integer `value` is when an arith.constant defines it; None otherwise."""
    from mlir import ir
    op = defining_op(value)
    if op is None or op.name != "arith.constant":
        return None
    attribute = op.attributes["value"]
    return attribute.value if isinstance(attribute, ir.IntegerAttr) else None


def offsets_sizes_strides(op) -> tuple:
    """(offsets, sizes, strides) of a subview or reinterpret_cast: each a list of static numbers, with the
    SSA value in place of each dynamic one (operands: source, then the dynamic offsets, sizes, strides)."""
    from mlir import ir
    dynamic = {"static_offsets": ir.ShapedType.get_dynamic_stride_or_offset(),
               "static_sizes": ir.ShapedType.get_dynamic_size(),
               "static_strides": ir.ShapedType.get_dynamic_stride_or_offset()}
    operands = iter(list(op.operands)[1:])
    groups = []
    for name, marker in dynamic.items():
        static = list(ir.DenseI64ArrayAttr(op.attributes[name]))
        groups.append([next(operands) if n == marker else n for n in static])
    return tuple(groups)
