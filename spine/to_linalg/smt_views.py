"""smt views of tensors: slices, packing into micro tiles and unpacking (reserved calls, smt_calls.py).

    slice2d(x, row, col)   -> tensor.extract_slice x[row:row+S0, col:col+S1]
    slice4d(x, rt, ct)     -> tensor.extract_slice x[rt:rt+T0, ct:ct+T1, :, :]     (whole micro tiles)
    pack(x) [R, C] -> [R/p0, C/p1, p0, p1]:
        %t = tensor.expand_shape %x [[0, 1], [2, 3]] : [R, C] -> [R/p0, p0, C/p1, p1]
        %p = linalg.transpose ins(%t) outs(...) permutation = [0, 2, 1, 3]
    unpack(x): the inverse (transpose, then collapse_shape), or, when x is such a pack of y, y itself

Run-time offsets are clamped so that the slice stays inside x: a wrong offset reads the wrong block, never
memory outside it. `packed_source` lets the packed matmul (smt_dot.py) read a packed operand from the
matrix it was packed from, without the transposed copy.
"""
from __future__ import annotations

from typing import Optional

from mlir import ir
from mlir.dialects import linalg, tensor

from . import builders as b
from . import index_math as im
from .smt_calls import lowers
from .types import element_type, shape_of

PACK_PERMUTATION = [0, 2, 1, 3]
TILE_GROUPS = [[0, 1], [2, 3]]   # packed dims (r1, p0) and (c1, p1) each come from one matrix dim


def _groups() -> ir.ArrayAttr:
    i64 = ir.IntegerType.get_signless(64)
    return ir.ArrayAttr.get([ir.ArrayAttr.get([ir.IntegerAttr.get(i64, d) for d in g]) for g in TILE_GROUPS])


def _clamped_offset(conv, operand, extent: int, size: int):
    return im.clamp(im.from_integer(conv.concrete(operand)), 0, extent - size)


@lowers("slice2d")
def convert_slice2d(conv, op):
    x = conv.concrete(op.operands[0])
    extent, shape = shape_of(x.type), shape_of(op.results[0].type)
    starts = [_clamped_offset(conv, operand, n, s) for operand, n, s in zip(list(op.operands)[1:3], extent, shape)]
    conv.bind(op.results[0], b.tensor_window(x, starts, shape))


@lowers("slice4d")
def convert_slice4d(conv, op):
    x = conv.concrete(op.operands[0])
    extent, shape = shape_of(x.type), shape_of(op.results[0].type)
    starts = [_clamped_offset(conv, operand, n, s) for operand, n, s in zip(list(op.operands)[1:3], extent, shape)]
    conv.bind(op.results[0], b.tensor_window(x, starts + [0, 0], shape))


def pack(x: ir.Value, packed_shape) -> ir.Value:
    r1, c1, p0, p1 = packed_shape
    elem = element_type(x.type)
    tiles = tensor.ExpandShapeOp(ir.RankedTensorType.get([r1, p0, c1, p1], elem), x, _groups(),
                                 [], ir.DenseI64ArrayAttr.get([r1, p0, c1, p1])).result
    return b.single_value(linalg.transpose(tiles, outs=[b.empty(packed_shape, elem)], permutation=PACK_PERMUTATION))


def _defining_op(value: ir.Value) -> Optional[ir.Operation]:
    owner = value.owner
    return getattr(owner, "operation", None) if not isinstance(owner, ir.Block) else None


def packed_source(value: ir.Value) -> Optional[ir.Value]:
    """The 2-D matrix a packed tensor was packed from by `pack`, or None."""
    transpose = _defining_op(value)
    if transpose is None or transpose.name != "linalg.transpose":
        return None
    if list(ir.DenseI64ArrayAttr(transpose.attributes["permutation"])) != PACK_PERMUTATION:
        return None
    expand = _defining_op(transpose.operands[0])
    if expand is None or expand.name != "tensor.expand_shape":
        return None
    source = expand.operands[0]
    groups = [[ir.IntegerAttr(d).value for d in group] for group in ir.ArrayAttr(expand.attributes["reassociation"])]
    return source if len(shape_of(source.type)) == 2 and groups == TILE_GROUPS else None


def unpack(x: ir.Value) -> ir.Value:
    source = packed_source(x)
    if source is not None:
        return source
    r1, c1, p0, p1 = shape_of(x.type)
    elem = element_type(x.type)
    rows = b.single_value(linalg.transpose(x, outs=[b.empty([r1, p0, c1, p1], elem)], permutation=PACK_PERMUTATION))
    return tensor.CollapseShapeOp(ir.RankedTensorType.get([r1 * p0, c1 * p1], elem), rows,
                                  _groups()).result


@lowers("pack")
def convert_pack(conv, op):
    conv.bind(op.results[0], pack(conv.concrete(op.operands[0]), shape_of(op.results[0].type)))


@lowers("unpack")
def convert_unpack(conv, op):
    conv.bind(op.results[0], unpack(conv.concrete(op.operands[0])))
