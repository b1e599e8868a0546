"""tt.atomic_rmw and tt.atomic_cas: element by element (masked lanes skipped), as memref.atomic_rmw and
memref.generic_atomic_rmw, which LLVM turns into atomic instructions or compare-and-swap loops. Each
returns the old values. Ordering is at least as strong as the kernel asked for (acq_rel). With
debug=True each lane is first checked against its argument's extent (bounds.py)."""
from __future__ import annotations

from dataclasses import replace

from mlir import ir
from mlir.dialects import arith, bufferization, func, linalg, memref, scf, tensor

from ..ir_names import CAS_FUNCTION
from . import bounds
from . import builders as b
from . import index_math as im
from . import materialize
from . import states as st
from .converter import handles
from .memory import each_unmasked_element, mask_bytes, split_operands
from .types import memref_of


# triton's RMWOp enum (triton._C.libtriton.ir.ATOMIC_OP) → memref.atomic_rmw kind, by value class
_INT_KINDS = {1: "andi", 2: "ori", 3: "xori", 4: "addi", 6: "maxs", 7: "mins", 8: "maxu", 9: "minu", 10: "assign"}
_FLOAT_KINDS = {5: "addf", 4: "addf", 6: "maximumf", 7: "minimumf", 10: "assign"}
ATOMIC = "atomic on"  # how bounds-check failures name the access


def _kind(op, element_type: ir.Type):
    code = ir.IntegerAttr(op.attributes["atomic_rmw_op"]).value
    table = _INT_KINDS if isinstance(element_type, ir.IntegerType) else _FLOAT_KINDS
    if code not in table:
        return None
    return getattr(arith.AtomicRMWKind, table[code])


def _elementwise(conv, op, ptr, mask_operand, update):
    """Run `update(base, index, lane_ivs) -> old value` for every unmasked lane; gather the old values."""
    if ptr.base in conv.argument_of:   # not an smt scratch buffer (smt_scratch.py)
        conv.written_args.add(conv.argument_of[ptr.base])
    if not ptr.shape:
        def scalar():
            offset = im.as_value(ptr.offset)
            return bounds.guard_value(conv, op, ptr.base, offset, ATOMIC, ptr.element_type,
                                      lambda: update(ptr.base, offset, []))
        if mask_operand is None:
            return scalar()
        branch = scf.IfOp(conv.concrete(mask_operand), [ptr.element_type], has_else=True)
        with ir.InsertionPoint(branch.then_block):
            scf.YieldOp([scalar()])
        with ir.InsertionPoint(branch.else_block):
            scf.YieldOp([b.zero(ptr.element_type)])
        return branch.results[0]
    gather = ptr if isinstance(ptr, st.GatherPointer) else materialize.gather_pointer(ptr)
    mask = mask_bytes(conv.concrete(mask_operand)) if mask_operand is not None else None
    old_values = memref.AllocOp(ir.MemRefType.get(list(ptr.shape), ptr.element_type), [], []).result
    linalg.fill(b.zero(ptr.element_type), outs=[old_values])

    def one(ivs):
        offset = im.from_integer(tensor.ExtractOp(gather.offsets, ivs).result)
        bounds.guard_element(conv, op, gather.base, offset, ATOMIC,
                             lambda: memref.StoreOp(update(gather.base, offset, ivs), old_values, ivs))
    each_unmasked_element(ptr.shape, mask, one)
    return bufferization.ToTensorOp(ir.RankedTensorType.get(list(ptr.shape), ptr.element_type), old_values,
                                    restrict=True, writable=True).result


def _pointer(conv, op, value):
    ptr = conv.state(value)
    if not isinstance(ptr, (st.PointerState, st.GatherPointer)):
        raise conv.unsupported(op, "atomic through a pointer of unknown origin")
    return ptr


@handles("tt.atomic_rmw")
def convert_atomic_rmw(conv, op):
    parts = split_operands(op, ("ptr", "val", "mask"))
    ptr = _pointer(conv, op, parts["ptr"])
    kind = _kind(op, ptr.element_type)
    if kind is None:
        raise conv.unsupported(op, "this atomic operation on this element type")
    values = conv.concrete(parts["val"])

    def update(base, index, ivs):
        value = tensor.ExtractOp(values, ivs).result if ivs else values
        return memref.AtomicRMWOp(kind, value, base, [index]).result
    conv.bind(op.results[0], _elementwise(conv, op, ptr, parts["mask"], update))




@handles("tt.atomic_cas")
def convert_atomic_cas(conv, op):
    """Compare-and-swap is a call to a declared function here; compiler/lower.py replaces each call with
    memref.generic_atomic_rmw after buffer deallocation, whose analysis rejects ops with regions. A float
    compare-and-swap runs on the same-width integers (LLVM's cmpxchg takes no floats), so it compares bits,
    as the GPUs' atom.cas does (-0.0 is not 0.0, a NaN equals itself)."""
    ptr = _pointer(conv, op, op.operands[0])
    expected_all, desired_all = conv.concrete(op.operands[1]), conv.concrete(op.operands[2])
    element = ptr.element_type
    if not isinstance(element, ir.IntegerType):
        from .function import argument_view
        bits = ir.IntegerType.get_signless(element.width)
        ptr = replace(ptr, base=argument_view(conv, ptr.base, bits), element_type=bits)
    callee = conv.declare(f"{CAS_FUNCTION}.{ptr.element_type}",
                          [memref_of(ptr.element_type), ir.IndexType.get(), ptr.element_type, ptr.element_type],
                          [ptr.element_type])

    def update(base, index, ivs):
        expected = tensor.ExtractOp(expected_all, ivs).result if ivs else expected_all
        desired = tensor.ExtractOp(desired_all, ivs).result if ivs else desired_all
        if element != ptr.element_type:
            expected, desired = (arith.BitcastOp(ptr.element_type, v).result for v in (expected, desired))
        return func.CallOp([ptr.element_type], ir.FlatSymbolRefAttr.get(callee), [base, index, expected,
                                                                                   desired]).result
    old = _elementwise(conv, op, ptr, None, update)
    if element != ptr.element_type:
        old = arith.BitcastOp(op.results[0].type, old).result
    conv.bind(op.results[0], old)
