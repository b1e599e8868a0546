"""tt.print and tt.assert (tl.device_print, tl.device_assert with debug=True): element by element, calls
into the runtime's device_io.c, which prints whole lines under a lock and records the first failed
assertion for the launcher to raise. gpu.barrier (tl.debug_barrier) emits nothing: a program runs on one
thread, whose program order already orders its own loads and stores; ordering between programs is the
atomics' business. llvm.intr.assume (tl.assume, which Inductor's Triton templates emit) of a scalar
becomes a call of LLVM's llvm.assume intrinsic, which LLVM's optimiser may use (a false assumption is
undefined behaviour, as on a GPU); of a tensor it emits nothing: a hint, and the kernel computes the
same without it."""
from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, memref, scf, tensor

from . import builders as b
from . import index_math as im
from ..errors import describe_location
from .converter import handles
from .types import element_type, shape_of

I32 = lambda: ir.IntegerType.get_signless(32)  # noqa: E731
I64 = lambda: ir.IntegerType.get_signless(64)  # noqa: E731


@handles("gpu.barrier")
def convert_barrier(conv, op):
    pass


@handles("llvm.intr.assume")
def convert_assume(conv, op):
    condition = conv.concrete(op.operands[0])
    if condition.type == ir.IntegerType.get_signless(1):
        # A call of the intrinsic by name (LLVM reads `@llvm.assume` as it): the llvm.intr.assume op
        # itself has memory effects that bufferization does not accept.
        conv.call("llvm.assume", [condition])


def string_address(conv, text: str) -> ir.Value:
    """The address (as i64) of a NUL-terminated constant string in the kernel."""
    data = text.encode() + b"\0"
    name = f"spine.str.{len(conv.declared)}"
    ty = ir.MemRefType.get([len(data)], ir.IntegerType.get_signless(8))
    if text not in conv.strings:
        import numpy as np
        values = ir.DenseElementsAttr.get(np.frombuffer(data, dtype=np.int8), type=ty.element_type,
                                          shape=[len(data)])
        with ir.InsertionPoint.at_block_begin(conv.module.body), ir.Location.unknown():
            memref.GlobalOp(name, ir.TypeAttr.get(ty), sym_visibility="private", initial_value=values,
                            constant=True)
        conv.declared[name] = None
        conv.strings[text] = name
    buffer = memref.GetGlobalOp(ty, conv.strings[text]).result
    address = memref.ExtractAlignedPointerAsIndexOp(buffer).result
    return arith.IndexCastOp(I64(), address).result


def _linear_index(ivs, shape) -> ir.Value:
    index = 0
    for iv, n in zip(ivs, shape):
        index = im.add(im.mul(index, n), iv)
    return arith.IndexCastOp(I64(), im.as_value(index)).result


def _each_element(value: ir.Value, body) -> None:
    """body(element, linear index as i64) for every element of a tensor, or once for a scalar (index -1)."""
    shape = shape_of(value.type)
    if not shape:
        body(value, arith.ConstantOp(I64(), -1).result)
        return
    b.loop_nest(shape, lambda ivs: body(tensor.ExtractOp(value, ivs).result, _linear_index(ivs, shape)))


@handles("tt.print")
def convert_print(conv, op):
    prefix = string_address(conv, ir.StringAttr(op.attributes["prefix"]).value)
    hex_output = bool(ir.BoolAttr(op.attributes["hex"]).value)
    signed = list(ir.DenseI32ArrayAttr(op.attributes["isSigned"])) if "isSigned" in op.attributes else []
    pids = conv.program_ids[:3]
    many = len(op.operands) > 1
    for k, operand in enumerate(op.operands):
        value = conv.concrete(operand)
        elem = element_type(value.type)
        operand_no = arith.ConstantOp(I32(), k if many else -1).result
        if isinstance(elem, ir.IntegerType):
            is_signed = bool(signed[k]) if k < len(signed) else True
            def emit(element, index, is_signed=is_signed):
                wide = element if elem.width == 64 else (
                    arith.ExtSIOp(I64(), element).result if is_signed and elem.width > 1
                    else arith.ExtUIOp(I64(), element).result)
                conv.call("spine_print_i64", [prefix, *pids, index, operand_no, wide,
                                              arith.ConstantOp(I32(), int(is_signed)).result,
                                              arith.ConstantOp(I32(), int(hex_output)).result])
        else:
            def emit(element, index):
                wide = element if isinstance(elem, ir.F64Type) else arith.ExtFOp(ir.F64Type.get(), element).result
                conv.call("spine_print_f64", [prefix, *pids, index, operand_no, wide])
        _each_element(value, emit)


@handles("tt.assert")
def convert_assert(conv, op):
    text = f"{describe_location(op.location)}: {ir.StringAttr(op.attributes['message']).value}"
    message = string_address(conv, text)
    condition = conv.concrete(op.operands[0])
    if shape_of(condition.type):
        from .memory import mask_bit, mask_bytes
        condition = mask_bytes(condition)
        shape = shape_of(condition.type)

        def check(ivs):
            _fail_unless(conv, mask_bit(condition, ivs), message, conv.program_ids[:3], _linear_index(ivs, shape))
        b.loop_nest(shape, check)
    else:
        _fail_unless(conv, condition, message, conv.program_ids[:3], arith.ConstantOp(I64(), -1).result)


def _fail_unless(conv, ok: ir.Value, message: ir.Value, pids, index: ir.Value) -> None:
    failed = arith.XOrIOp(ok, arith.ConstantOp(ok.type, 1).result).result
    branch = scf.IfOp(failed)
    with ir.InsertionPoint(branch.then_block):
        conv.call("spine_assert_fail", [message, *pids, index])
        scf.YieldOp([])
