"""Where bufferization's buffers live and how copies between them are made, before the loops are formed:

- small-tiles-on-stack: a small static allocation at a function's top level becomes an alloca;
- copies-to-linalg: memref.copy becomes linalg.copy (a loop, not a call into MLIR's runner library)."""
from __future__ import annotations

from ..ir_walk import collect_ops
from ..targets import STACK_TILE_BYTES


def small_tiles_on_stack(module) -> None:
    """Static allocations of at most STACK_TILE_BYTES in a function's top-level block become allocas: no
    malloc per program instance.

        %t = memref.alloc() {alignment = 64} : memref<1024xf32>     (in the function's entry block)
      becomes
        %t = memref.alloca() {alignment = 64} : memref<1024xf32>
 Upstream's promote-buffers-to-stack would also promote allocations inside
    loops, where every iteration would grow the stack; hoisting already moved the hoistable ones out."""
    from mlir import ir
    from mlir.dialects import memref

    def small_top_level_alloc(op) -> bool:
        if op.name != "memref.alloc" or op.parent.name != "func.func":
            return False
        ty = ir.MemRefType(op.results[0].type)
        width = getattr(ty.element_type, "width", 64)
        count = 1
        for n in (ty.shape if ty.has_static_shape else [1 << 62]):
            count *= n
        return count * width <= STACK_TILE_BYTES * 8
    for op in collect_ops(module, small_top_level_alloc):
        with ir.InsertionPoint(op), op.location:
            alloca = memref.AllocaOp(op.results[0].type, [], [], alignment=op.attributes["alignment"]
                                     if "alignment" in op.attributes else None)
        op.results[0].replace_all_uses_with(alloca.result)
        op.erase()


def copies_to_linalg(module) -> None:
    """memref.copy of strided memrefs lowers to a call into MLIR's C runner library (`memrefCopy`); as a
    linalg.copy it becomes a plain loop and the kernel .so stays self-contained.

        memref.copy %a, %b : memref<?xf32, strided<[?]>> to memref<?xf32>
      becomes
        linalg.copy ins(%a : memref<?xf32, strided<[?]>>) outs(%b : memref<?xf32>)"""
    from mlir import ir
    from mlir.dialects import linalg

    def copy(op) -> bool:
        return op.name == "memref.copy"
    for op in collect_ops(module, copy):
        with ir.InsertionPoint(op), op.location:
            linalg.copy(op.operands[0], outs=[op.operands[1]])
        op.erase()
