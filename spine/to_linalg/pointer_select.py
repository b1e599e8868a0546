"""arith.select between pointers into the same argument (tl.where on pointers; triton's descriptor rewrite
selects between a fresh and a loop-carried pointer).

    same shape and strides, a scalar condition   the offset is selected: the access stays a strided block
    otherwise                                    both become gathers and their offsets are selected
                                                 elementwise

    into two arguments, a scalar condition     the argument's memref is selected (both count as written:
                                                 the store that may follow cannot tell which it is)
    addresses made from integers                 the integers are selected (tt.int_to_ptr)

An elementwise choice between pointers into different arguments is not supported: a gather reads one memref.
"""
from __future__ import annotations

from dataclasses import replace

from mlir import ir
from mlir.dialects import arith

from . import index_math as im
from . import materialize
from . import states as st


def _same_structure(a, b) -> bool:
    return st.same_layout(a, b) and a.base == b.base


def _as_gather(state) -> st.GatherPointer:
    return state if isinstance(state, st.GatherPointer) else materialize.gather_pointer(state)


def convert_pointer_select(conv, op) -> None:
    cond_value, a_value, b_value = op.operands
    a, b = conv.state(a_value), conv.state(b_value)
    cond = conv.concrete(cond_value)
    if isinstance(a, st.IntegerAddress) and isinstance(b, st.IntegerAddress):
        conv.bind(op.results[0], st.IntegerAddress(arith.SelectOp(cond, a.value, b.value).result))
        return
    if not all(isinstance(s, (st.PointerState, st.GatherPointer)) for s in (a, b)):
        raise conv.unsupported(op, "a select between pointers of unknown origin")
    if a.base != b.base:
        if not isinstance(cond.type, ir.RankedTensorType) and a.base.type == b.base.type and \
                _same_structure(a, replace(b, base=a.base)):
            conv.written_args.update(conv.argument_of[x] for x in (a.base, b.base) if x in conv.argument_of)
            base = arith.SelectOp(cond, a.base, b.base).result
            offset = arith.SelectOp(cond, im.as_value(a.offset), im.as_value(b.offset)).result
            conv.bind(op.results[0], replace(a, base=base, offset=offset))
            return
        raise conv.unsupported(op, "an elementwise select between pointers into different arguments")
    if _same_structure(a, b) and not isinstance(cond.type, ir.RankedTensorType):
        offset = arith.SelectOp(cond, im.as_value(a.offset), im.as_value(b.offset)).result
        conv.bind(op.results[0], replace(a, offset=offset))
        return
    ga, gb = _as_gather(a), _as_gather(b)          # a scalar condition selects whole offset tensors
    conv.bind(op.results[0], replace(ga, offsets=arith.SelectOp(cond, ga.offsets, gb.offsets).result))
