"""A packed matmul's product stored whole is written straight into its destination.

The packed matmul writes its product into a buffer of its own (to_linalg/smt_dot.py), and a tl.store of
it then copies the stored window into the output: for an fp32 smt.dot in spine-triton's matmul, a copy of
every 256 x 256 product through the cache, 4 % of the kernel's time. After bufferization:

    func.call @spine_smt_matmul_X(%a, %b, %product) {spine.strided_twin = "spine_smt_matmul_Y"}
    ...                                           (views: the store's window and destination)
    linalg.copy ins(subview %product[%row0, %col0] [%rows, %cols] [1, 1]) outs(%destination)

@Y is the same product written into a view of a larger matrix. A tile that is whole at run time (the
window is all of the product, and the destination's columns have unit stride) takes it, unless the
destination's rows are a multiple of L1_WAY_BYTES apart: the register block's rows of C would share one L1
set (at 1024^3 fp32, 4 KiB rows, writing C directly was 3 % slower than the copy); an edge tile keeps the
buffer and the copy:

    scf.if %whole { func.call @Y(%a, %b, memref.cast %destination) }
    else          { func.call @X(%a, %b, %product); linalg.copy ... }

Between the call and the copy only ops that make views and indices may stand (the call moves to the copy,
past them); the product buffer must be read by nothing else.
"""
from __future__ import annotations

from typing import Optional

from ..ir_names import STRIDED_TWIN
from ..targets import L1_WAY_BYTES
from ..ir_walk import collect_ops, defining_op, erase_uncalled, last_input_type, offsets_sizes_strides, view_or_index


def store_products_in_place(module) -> None:
    from mlir import ir
    twins = set()
    for call in collect_ops(module, lambda op: op.name == "func.call" and STRIDED_TWIN in op.attributes):
        twins.add(ir.StringAttr(call.attributes[STRIDED_TWIN]).value)
        copy = _copy_of_product(call)
        if copy is not None:
            _into_destination(module, call, copy)
        else:
            del call.attributes[STRIDED_TWIN]
    erase_uncalled(module, twins)


def _copy_of_product(call) -> Optional[object]:
    """The linalg.copy later in the call's block that copies a window (unit steps) of the product buffer,
    when nothing else reads the buffer and only view and index ops stand between the two."""
    product = call.operands[len(call.operands) - 1]
    copy, passed = None, False
    for op in call.operation.block.operations:
        if op == call:
            passed = True
            continue
        if not passed:
            continue
        if op.name == "linalg.copy":
            copy = op
            break
        if not view_or_index(op):
            return None
    if copy is None or not _is_window_of(copy.operands[0], product):
        return None
    for use in product.uses:
        user = use.owner
        if user == call or user.name == "memref.dealloc":
            continue
        if user.name == "memref.subview" and all(u.owner == copy for u in user.results[0].uses):
            continue
        return None
    return copy


def _is_window_of(value, buffer) -> bool:
    if value == buffer:
        return True
    owner = defining_op(value)
    if owner is None or owner.name != "memref.subview" or owner.operands[0] != buffer:
        return False
    return all(step == 1 for step in offsets_sizes_strides(owner)[2])


def _whole(window, shape: list):
    """An i1: the window starts at the product's origin and spans all of it."""
    from mlir import ir
    from mlir.dialects import arith
    index = ir.IndexType.get()

    def equal(value, number: int):
        if isinstance(value, int):
            return arith.ConstantOp(ir.IntegerType.get_signless(1), int(value == number)).result
        return arith.CmpIOp(arith.CmpIPredicate.eq, value, arith.ConstantOp(index, number).result).result
    owner = defining_op(window)
    if owner is None or owner.name != "memref.subview":
        return arith.ConstantOp(ir.IntegerType.get_signless(1), 1).result
    offsets, sizes, _ = offsets_sizes_strides(owner)
    checks = [equal(o, 0) for o in offsets] + [equal(size, n) for size, n in zip(sizes, shape)]
    whole = checks[0]
    for check in checks[1:]:
        whole = arith.AndIOp(whole, check).result
    return whole


def _into_destination(module, call, copy) -> None:
    from mlir import ir
    from mlir.dialects import arith, func, memref, scf
    twin = ir.StringAttr(call.attributes[STRIDED_TWIN]).value
    twin_out = last_input_type(module, twin)
    product_shape = list(ir.MemRefType(call.operands[len(call.operands) - 1].type).shape)
    window, destination = copy.operands[0], copy.operands[1]
    with ir.InsertionPoint(copy), copy.location:
        index = ir.IndexType.get()
        meta = memref.ExtractStridedMetadataOp(destination)
        rank = len(product_shape)
        row_stride, column_stride = meta.results[2 + 2 * rank - 2], meta.results[2 + 2 * rank - 1]
        unit = arith.CmpIOp(arith.CmpIPredicate.eq, column_stride, arith.ConstantOp(index, 1).result).result
        width = ir.MemRefType(destination.type).element_type.width // 8
        apart = arith.RemUIOp(row_stride, arith.ConstantOp(index, L1_WAY_BYTES // width).result).result
        spread = arith.CmpIOp(arith.CmpIPredicate.ne, apart, arith.ConstantOp(index, 0).result).result
        direct = arith.AndIOp(arith.AndIOp(_whole(window, product_shape), unit).result, spread).result
        branch = scf.IfOp(direct, has_else=True)
        with ir.InsertionPoint(branch.then_block):
            view = memref.CastOp(twin_out, destination).result
            func.CallOp([], ir.FlatSymbolRefAttr.get(twin), list(call.operands)[:-1] + [view])
            scf.YieldOp([])
        with ir.InsertionPoint(branch.else_block):
            scf.YieldOp([])
    else_yield = branch.else_block.operations[0]
    call.move_before(else_yield)
    copy.move_before(else_yield)
    del call.attributes[STRIDED_TWIN]
