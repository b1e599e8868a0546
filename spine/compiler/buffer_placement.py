"""Where bufferization's buffers live and how copies between them are made, before the loops are formed:

- small-tiles-on-stack: a small static allocation outside every loop becomes an alloca;
- copies-to-linalg: memref.copy becomes linalg.copy (a loop, not a call into MLIR's runner library)."""
from __future__ import annotations

from ..ir_walk import ancestors, collect_ops
from ..targets import STACK_TILE_BYTES


# The most stack the promoted buffers of one function may take together: kernels run on the launching
# thread too (the Python thread, natively), whose stack is the process's 8 MiB, not a worker's 64.
STACK_FRAME_BYTES = 1 << 20
_LOOPS = ("scf.for", "scf.while", "scf.parallel", "scf.forall", "affine.for", "affine.parallel")


def small_tiles_on_stack(module) -> None:
    """Static allocations of at most STACK_TILE_BYTES outside every loop become allocas at the start of
    their function: no malloc per program instance. An allocation inside a branch (scf.if, as a masked load
    inside `if` or behind a lock gives one) moves to the function's entry block, where it is a fixed stack
    slot; the buffer then lives until the function returns, which outlives every use.

        %t = memref.alloc() {alignment = 64} : memref<1024xf32>     (in the function's body or a branch)
      becomes
        %t = memref.alloca() {alignment = 64} : memref<1024xf32>    (first in the function's entry block)

    Allocations inside loops stay: as allocas every iteration would grow the stack (upstream's
    promote-buffers-to-stack would do that; hoisting already moved the hoistable ones out). A function's
    promoted buffers stay within STACK_FRAME_BYTES together; the rest stay on the heap."""
    from mlir import ir
    from mlir.dialects import memref

    def static_bytes(op) -> int | None:
        ty = ir.MemRefType(op.results[0].type)
        if not ty.has_static_shape:
            return None
        count = 1
        for n in ty.shape:
            count *= n
        return count * getattr(ty.element_type, "width", 64) // 8

    def function_outside_loops(op):
        for parent in ancestors(op):
            if parent.name in _LOOPS:
                return None
            if parent.name == "func.func":
                return parent
        return None

    budget = {}
    for op in collect_ops(module, lambda op: op.name == "memref.alloc"):
        size, fn = static_bytes(op), function_outside_loops(op)
        if size is None or size > STACK_TILE_BYTES or fn is None:
            continue
        name = ir.StringAttr(fn.attributes["sym_name"]).value   # every func.func has one
        if budget.get(name, 0) + size > STACK_FRAME_BYTES:
            continue
        budget[name] = budget.get(name, 0) + size
        entry = fn.regions[0].blocks[0]
        with ir.InsertionPoint.at_block_begin(entry), op.location:
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
