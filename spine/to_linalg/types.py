"""TTIR types as upstream MLIR sees them (triton's `!tt.ptr<T>` arrives as an opaque type)."""
from __future__ import annotations

from mlir import ir


def is_pointer(ty: ir.Type) -> bool:
    """Scalar `!tt.ptr<T>` or a tensor of them."""
    if isinstance(ty, ir.RankedTensorType):
        ty = ty.element_type
    return isinstance(ty, ir.OpaqueType) and ty.dialect_namespace == "tt" and ty.data.startswith("ptr<")


def pointee_type(ty: ir.Type) -> ir.Type:
    """T of `!tt.ptr<T>` (or of a tensor of pointers); the address space, if any, is dropped.

    Booleans live in memory as bytes (torch.bool, and triton loads them through i8), so `ptr<i1>`
    points to i8."""
    if isinstance(ty, ir.RankedTensorType):
        ty = ty.element_type
    inner = ty.data[len("ptr<"):-1]
    depth, cut = 0, len(inner)
    for i, ch in enumerate(inner):
        depth += ch == "<"
        depth -= ch == ">"
        if ch == "," and depth == 0:
            cut = i
            break
    text = inner[:cut].strip()
    if text.startswith("ptr<"):
        raise NotImplementedError("pointers to pointers")
    if text == "i1":
        text = "i8"
    return ir.Type.parse(text)


def element_bytes(elem: ir.Type) -> int:
    """Bytes of one element in memory: its width rounded up to a byte (i1 as a byte); 8 for a type without
    one (a pointer)."""
    return max(1, getattr(elem, "width", 64) // 8)


def shape_of(ty: ir.Type) -> tuple:
    return tuple(ty.shape) if isinstance(ty, ir.RankedTensorType) else ()


def element_type(ty: ir.Type) -> ir.Type:
    return ty.element_type if isinstance(ty, ir.RankedTensorType) else ty


def is_integer(ty: ir.Type) -> bool:
    return isinstance(element_type(ty), (ir.IntegerType, ir.IndexType))


def is_bool(ty: ir.Type) -> bool:
    elem = element_type(ty)
    return isinstance(elem, ir.IntegerType) and elem.width == 1


def memref_of(elem: ir.Type) -> ir.Type:
    """How a kernel pointer argument appears inside the converted function."""
    return ir.MemRefType.get([ir.ShapedType.get_dynamic_size()], elem)
