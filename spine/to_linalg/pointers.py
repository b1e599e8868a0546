"""tt.addptr: pointer arithmetic on PointerState, falling back to GatherPointer when the offsets are not
affine (e.g. `ptr + idx_loaded_from_memory`)."""
from __future__ import annotations

from dataclasses import replace

from mlir import ir
from mlir.dialects import arith

from . import index_math as im
from . import materialize
from . import states as st
from .converter import handles


def _as_gather(state) -> st.GatherPointer:
    return state if isinstance(state, st.GatherPointer) else materialize.gather_pointer(state)


def _offsets_i64(value: ir.Value) -> ir.Value:
    i64 = ir.IntegerType.get_signless(64)
    elem = ir.RankedTensorType(value.type).element_type
    if ir.IntegerType(elem).width == 64:
        return value
    ty = ir.RankedTensorType.get(list(value.type.shape), i64)
    return arith.ExtSIOp(ty, value).result


@handles("tt.addptr")
def convert_addptr(conv, op):
    ptr = conv.state(op.operands[0])
    offset = conv.state(op.operands[1])
    result = op.results[0]
    if isinstance(ptr, st.PointerState) and not ptr.shape:
        # scalar pointer + scalar integer
        conv.bind(result, replace(ptr, offset=im.add(ptr.offset, im.from_integer(conv.concrete(op.operands[1])))))
        return
    if isinstance(ptr, st.PointerState) and isinstance(offset, st.AffineIndex):
        conv.bind(result, st.offset_pointer(ptr, offset))
        return
    if not isinstance(ptr, (st.PointerState, st.GatherPointer)):
        raise conv.unsupported(op, "pointer of unknown origin")
    gather = _as_gather(ptr)
    offsets = arith.AddIOp(gather.offsets, _offsets_i64(conv.concrete(op.operands[1]))).result
    conv.bind(result, replace(gather, offsets=offsets))
