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


def ancestors(op):
    """The ops `op` is nested in, innermost first, up to the module."""
    op = op.parent
    while op is not None:
        yield op
        op = op.parent


def enclosing_function(op):
    """The func.func `op` is nested in, or None."""
    return next((x for x in ancestors(op) if x.name == "func.func"), None)


def inside(op, ancestor) -> bool:
    """Whether `op` is `ancestor` or nested in one of its regions."""
    while op is not None:
        if op == ancestor:
            return True
        op = op.parent
    return False


def defined_outside(value, op) -> bool:
    """Whether `value` is defined outside `op` (so it is the same in every run of op's regions)."""
    owner = defining_op(value)
    if owner is None:
        return not inside(value.owner.owner, op)
    return not inside(owner, op)


# Operations that only name part of a memref in another shape: what reads and writes through them reaches
# their first operand's memory.
VIEW_OPS = ("memref.subview", "memref.cast", "memref.reinterpret_cast", "memref.expand_shape",
            "memref.collapse_shape", "memref.transpose", "memref.view")


def without_effects(op) -> bool:
    """Whether `op` neither reads nor writes memory nor has another effect: arithmetic, math, a view, a
    memref's size."""
    return op.name.startswith(("arith.", "math.")) or op.name in VIEW_OPS or op.name == "memref.dim"


# Operations that name part of a memref or compute an index, and neither read nor write memory: a call may
# move past them, and they may be computed earlier.
VIEW_AND_INDEX_OPS = ("memref.subview", "memref.reinterpret_cast", "memref.cast", "memref.extract_strided_metadata",
                      "memref.dim", "affine.apply")


def view_or_index(op) -> bool:
    """Whether `op` is one of VIEW_AND_INDEX_OPS or integer arithmetic (arith, index)."""
    return op.name in VIEW_AND_INDEX_OPS or op.name.startswith(("arith.", "index."))


def constant_int(value):
    """The integer `value` is when an arith.constant defines it (an i1's `true` is 1); None otherwise."""
    from mlir import ir
    op = defining_op(value)
    if op is None or op.name != "arith.constant":
        return None
    attribute = op.attributes["value"]
    if isinstance(attribute, ir.BoolAttr):
        return int(attribute.value)
    return attribute.value if isinstance(attribute, ir.IntegerAttr) else None


def interval(value, depth: int = 8) -> tuple:
    """(lowest, highest) `value` can be, each None when unknown: constants, and min and max of them."""
    constant = constant_int(value)
    if constant is not None:
        return constant, constant
    owner = defining_op(value)
    if depth == 0 or owner is None or owner.name not in ("arith.minsi", "arith.maxsi"):
        return None, None
    (lo_a, hi_a), (lo_b, hi_b) = (interval(v, depth - 1) for v in owner.operands)
    if owner.name == "arith.minsi":
        lo = None if lo_a is None or lo_b is None else min(lo_a, lo_b)
        hi = hi_a if hi_b is None else hi_b if hi_a is None else min(hi_a, hi_b)
    else:
        lo = lo_a if lo_b is None else lo_b if lo_a is None else max(lo_a, lo_b)
        hi = None if hi_a is None or hi_b is None else max(hi_a, hi_b)
    return lo, hi


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


def ancestor_in_block(op, block):
    """`op`, or the op of `block` it is nested in; None when it is in neither."""
    while op is not None and op.block != block:
        parent = op.parent
        op = parent.operation if parent is not None and parent.name != "builtin.module" else None
    return op


def at_origin(subview) -> bool:
    """Whether a subview starts at index 0 in every dimension and steps by 1."""
    from mlir import ir
    return all(v == 0 for v in ir.DenseI64ArrayAttr(subview.attributes["static_offsets"])) and \
        all(v == 1 for v in ir.DenseI64ArrayAttr(subview.attributes["static_strides"]))


def view_sizes(op) -> list:
    """The sizes of a subview or reinterpret_cast (static numbers, or the SSA values of dynamic ones)."""
    return offsets_sizes_strides(op)[1]


def same_place(a, b) -> bool:
    """Two reinterpret_casts of one base at one offset with the same strides."""
    (a_offsets, _, a_strides), (b_offsets, _, b_strides) = offsets_sizes_strides(a), offsets_sizes_strides(b)
    return a.operands[0] == b.operands[0] and a_offsets == b_offsets and a_strides == b_strides


def all_parallel(generic) -> bool:
    """Whether every loop of a linalg.generic is parallel (no reduction)."""
    from mlir import ir
    return all(str(kind) == "#linalg.iterator_type<parallel>"
               for kind in ir.ArrayAttr(generic.attributes["iterator_types"]))


def yields(block) -> list:
    """The values a region's block yields (its terminator's operands)."""
    return list(block.operations[len(block.operations) - 1].operands)


def yielded(block, index: int):
    """The value a region's block yields as result `index` (its terminator's operand)."""
    return yields(block)[index]


def accessed(op) -> tuple:
    """The memref a memref.load or memref.store accesses, and its indices."""
    operands = list(op.operands)
    return (operands[0], operands[1:]) if op.name == "memref.load" else (operands[1], operands[2:])


def through_views(value):
    """The memref under any views (VIEW_OPS) of `value`: a buffer's allocation, or a block argument."""
    op = defining_op(value)
    while op is not None and op.name in VIEW_OPS:
        value = op.operands[0]
        op = defining_op(value)
    return value


def through_casts(value):
    """The memref under any memref.casts of `value`."""
    op = defining_op(value)
    while op is not None and op.name == "memref.cast":
        value = op.operands[0]
        op = defining_op(value)
    return value


def window_at_origin(buffer, sizes):
    """A new subview buffer[0, ...][sizes] with unit steps (sizes: static numbers or SSA values), at the
    current insertion point."""
    from mlir import ir
    from mlir.dialects import memref
    ty = ir.MemRefType(buffer.type)
    strides, offset = ty.get_strides_and_offset()
    dynamic_size = ir.ShapedType.get_dynamic_size()
    static = [n if isinstance(n, int) else dynamic_size for n in sizes]
    result = ir.MemRefType.get(static, ty.element_type, layout=ir.StridedLayoutAttr.get(offset, strides))
    return memref.SubViewOp(
        result, buffer, [], [n for n in sizes if not isinstance(n, int)], [],
        ir.DenseI64ArrayAttr.get([0] * len(sizes)), ir.DenseI64ArrayAttr.get(static),
        ir.DenseI64ArrayAttr.get([1] * len(sizes))).result


def named(body, name: str):
    """The operation of a module's body (a block) that defines symbol `name` (a function, a global), or None."""
    from mlir import ir
    for op in body.operations:
        if "sym_name" in op.operation.attributes and ir.StringAttr(op.operation.attributes["sym_name"]).value == name:
            return op.operation
    return None


def last_input_type(module, name: str):
    """The type of the last argument of the module's function `name`."""
    from mlir import ir
    function = named(module.body, name)
    if function is None or function.name != "func.func":
        raise KeyError(name)
    return ir.FunctionType(ir.TypeAttr(function.attributes["function_type"]).value).inputs[-1]


def erase_uncalled(module, names: set) -> None:
    """Erases the module's functions among `names` that no func.call calls (a rewrite's twins that no call
    took: lowering them would cost compile time for nothing)."""
    from mlir import ir
    called = {ir.FlatSymbolRefAttr(op.attributes["callee"]).value
              for op in collect_ops(module, lambda op: op.name == "func.call")}
    for op in list(module.body.operations):
        if op.operation.name == "func.func" and ir.StringAttr(op.attributes["sym_name"]).value in names - called:
            op.operation.erase()

