"""booleans-as-bytes: every buffer of booleans holds one byte per element, before the LLVM dialect.

MLIR's memref-to-LLVM conversion asserts on a load or store of an element narrower than a byte
(MemRefToLLVM.cpp: `integralElementType.getWidth() >= 8`). Boolean buffers come from deallocation (the
ownership flags it passes to its `dealloc_helper` when a loop carries buffers) and from boolean tiles that
bufferization keeps in memory. LLVM gives an i1 a byte of memory anyway, so an i8 buffer has the same
layout; the values are widened when stored and narrowed when loaded:

    %m = memref.alloc() : memref<2xi1>
    memref.store %b, %m[%c0] : memref<2xi1>
    %v = memref.load %m[%c0] : memref<2xi1>
  becomes
    %m = memref.alloc() : memref<2xi8>
    %0 = arith.extui %b : i1 to i8
    memref.store %0, %m[%c0] : memref<2xi8>
    %1 = memref.load %m[%c0] : memref<2xi8>
    %v = arith.trunci %1 : i8 to i1

Runs after linalg became loops, where scalar loads and stores are the only accesses; an access of another
kind to a boolean buffer (a vector transfer, an atomic, a constant's global) is refused with its source
line."""
from __future__ import annotations

from ..errors import SpineCompilationError, describe_location
from ..ir_walk import collect_ops

# Operations that may hold a boolean buffer as an operand: the element type of their results follows the
# operands' (views, casts, the metadata of a buffer) or does not involve it (sizes, pointers, control flow).
_ELEMENT_AGNOSTIC = ("memref.alloc", "memref.alloca", "memref.dealloc", "memref.cast", "memref.subview",
                     "memref.reinterpret_cast", "memref.expand_shape", "memref.collapse_shape", "memref.transpose",
                     "memref.dim", "memref.rank", "memref.extract_strided_metadata",
                     "memref.extract_aligned_pointer_as_index", "func.call", "func.return", "scf.for",
                     "scf.if", "scf.yield", "scf.while", "scf.condition", "cf.br", "cf.cond_br")
# ... and those the pass rewrites.
_HANDLED = _ELEMENT_AGNOSTIC + ("memref.load", "memref.store")


def _bytes_type(ty):
    """The memref type `ty` with i8 elements where it has i1 ones; None for any other type."""
    from mlir import ir
    if isinstance(ty, ir.MemRefType) and _is_boolean(ty.element_type):
        return ir.MemRefType.get(ty.shape, ir.IntegerType.get_signless(8), ty.layout, ty.memory_space)
    if isinstance(ty, ir.UnrankedMemRefType) and _is_boolean(ty.element_type):
        return ir.UnrankedMemRefType.get(ir.IntegerType.get_signless(8), ty.memory_space)
    return None


def _is_boolean(ty) -> bool:
    from mlir import ir
    return isinstance(ty, ir.IntegerType) and ty.width == 1


def _is_boolean_global(op) -> bool:
    """Whether `op` is a memref.global of booleans (a constant tile kept in memory)."""
    from mlir import ir
    return op.name == "memref.global" and _bytes_type(ir.TypeAttr(op.attributes["type"]).value) is not None


def _boolean_values(module) -> list:
    """Every op result and block argument of the module whose type is a boolean buffer."""
    values = []

    def add(op) -> bool:
        values.extend(r for r in op.results if _bytes_type(r.type) is not None)
        for region in op.regions:
            for block in region.blocks:
                values.extend(a for a in block.arguments if _bytes_type(a.type) is not None)
        return False
    collect_ops(module, add)
    return values


def _refuse_other_accesses(module) -> None:
    """Accesses this pass does not rewrite, and boolean globals (a constant tile in memory: its initial
    value would need converting too)."""
    def other_access(op) -> bool:
        if op.name == "memref.global":
            return _is_boolean_global(op)
        return op.name not in _HANDLED and any(
            _bytes_type(v.type) is not None for v in list(op.operands) + list(op.results))
    refused = collect_ops(module, other_access)
    if refused:
        raise SpineCompilationError(
            f"unsupported: a boolean tensor kept in memory and accessed by {refused[0].name} (at "
            f"{describe_location(refused[0].location)}); convert it to int8 first")


def _widen_stores(module) -> None:
    from mlir import ir
    from mlir.dialects import arith, memref
    i8 = ir.IntegerType.get_signless(8)
    for op in collect_ops(module, lambda op: op.name == "memref.store" and _is_boolean(op.operands[0].type)):
        value, buffer, *indices = op.operands
        with ir.InsertionPoint(op), op.location:
            memref.StoreOp(arith.extui(i8, value), buffer, indices)
        op.erase()


def _narrow_loads(module) -> None:
    from mlir import ir
    from mlir.dialects import arith, memref
    i1 = ir.IntegerType.get_signless(1)
    for op in collect_ops(module, lambda op: op.name == "memref.load" and _is_boolean(op.results[0].type)):
        buffer, *indices = op.operands
        with ir.InsertionPoint(op), op.location:
            narrowed = arith.trunci(i1, memref.load(buffer, indices))
        op.results[0].replace_all_uses_with(narrowed)
        op.erase()


def _retype_functions(module) -> None:
    from mlir import ir
    for op in collect_ops(module, lambda op: op.name == "func.func"):
        old = ir.FunctionType(ir.TypeAttr(op.attributes["function_type"]).value)
        if not op.regions[0].blocks:
            inputs = [_bytes_type(t) or t for t in old.inputs]
        else:
            inputs = [a.type for a in op.regions[0].blocks[0].arguments]
        results = [_bytes_type(t) or t for t in old.results]
        op.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(inputs, results))


def has_boolean_buffers(module) -> bool:
    """Whether the module holds a boolean buffer (the pass's condition)."""
    return bool(_boolean_values(module)) or bool(collect_ops(module, _is_boolean_global))


def booleans_as_bytes(module) -> None:
    """The rewrite in the module docstring, on every boolean buffer of the module."""
    values = _boolean_values(module)
    _refuse_other_accesses(module)
    for value in values:
        value.set_type(_bytes_type(value.type))
    _widen_stores(module)
    _narrow_loads(module)
    _retype_functions(module)
