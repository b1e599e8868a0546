"""Small helpers that emit upstream ops whose Python builders are verbose (linalg.generic, loop nests,
strided views)."""
from __future__ import annotations

from typing import Callable, Sequence

from mlir import ir
from mlir.dialects import arith, linalg, memref, scf, tensor

from . import index_math as im

DYNAMIC = ir.ShapedType.get_dynamic_size()
DYNAMIC_STRIDE = ir.ShapedType.get_dynamic_stride_or_offset()


def parallel_iterators(rank: int) -> ir.ArrayAttr:
    return ir.ArrayAttr.get([ir.Attribute.parse("#linalg.iterator_type<parallel>")] * rank)


def identity_map(rank: int) -> ir.AffineMapAttr:
    return ir.AffineMapAttr.get(ir.AffineMap.get_identity(rank))


def generic(result_types: Sequence[ir.Type], inputs: Sequence[ir.Value], outputs: Sequence[ir.Value],
            maps: Sequence[ir.AffineMapAttr], rank: int, body: Callable[..., Sequence[ir.Value]]):
    """linalg.generic over `rank` parallel loops; `body` receives the block arguments and returns yields."""
    op = linalg.GenericOp(list(result_types), list(inputs), list(outputs), ir.ArrayAttr.get(list(maps)),
                          parallel_iterators(rank))
    types = [ir.ShapedType(v.type).element_type for v in list(inputs) + list(outputs)]
    block = op.regions[0].blocks.append(*types)
    with ir.InsertionPoint(block):
        linalg.YieldOp(list(body(*block.arguments)))
    return op


def single_value(built) -> ir.Value:
    """The one result of what a dialect helper returned (a value, an op, or a result list)."""
    if isinstance(built, ir.Value):
        return built
    results = getattr(built, "results", built)
    return results[0]


def empty(shape, elem: ir.Type) -> ir.Value:
    return tensor.EmptyOp(list(shape), elem).result


def tabulate(shape, elem: ir.Type, fn: Callable[[list], ir.Value]) -> ir.Value:
    """A tensor whose element at i is fn([index values of i])."""
    out = empty(shape, elem)
    rank = len(shape)

    def body(_out):
        return [fn([linalg.IndexOp(d).result for d in range(rank)])]
    return generic([out.type], [], [out], [identity_map(rank)], rank, body).results[0]


def splat(scalar: ir.Value, shape) -> ir.Value:
    out = empty(shape, scalar.type)
    return linalg.fill(scalar, outs=[out])


def zero(elem: ir.Type) -> ir.Value:
    if isinstance(elem, (ir.IntegerType, ir.IndexType)):
        return arith.ConstantOp(elem, 0).result
    return arith.ConstantOp(elem, 0.0).result


def is_positive_zero(value: ir.Value) -> bool:
    """Whether the value is an arith.constant +0.0 or integer 0, a scalar or a splat tensor (-0.0 is not:
    added to a -0.0 it does not give -0.0)."""
    owner = value.owner
    if getattr(owner, "name", None) != "arith.constant":
        return False
    attr = owner.attributes["value"]
    if isinstance(attr, ir.DenseElementsAttr):
        if not attr.is_splat:
            return False
        attr = attr.get_splat_value()
    if isinstance(attr, ir.FloatAttr):
        return attr.value == 0.0 and not str(attr).lstrip().startswith("-")
    return isinstance(attr, ir.IntegerAttr) and attr.value == 0


def strided_view(base: ir.Value, elem: ir.Type, shape, offset, strides) -> ir.Value:
    """memref.reinterpret_cast of a kernel argument to a tile-shaped strided view (sizes and strides are
    Index: ints become static)."""
    static_strides = [s if isinstance(s, int) else DYNAMIC_STRIDE for s in strides]
    static_offset = offset if isinstance(offset, int) else DYNAMIC_STRIDE
    static_sizes = [n if isinstance(n, int) else DYNAMIC for n in shape]
    layout = ir.StridedLayoutAttr.get(static_offset, static_strides)
    ty = ir.MemRefType.get(static_sizes, elem, layout=layout)
    return memref.ReinterpretCastOp(
        ty, base, [] if isinstance(offset, int) else [offset], [n for n in shape if not isinstance(n, int)],
        [s for s in strides if not isinstance(s, int)],
        ir.DenseI64ArrayAttr.get([static_offset]), ir.DenseI64ArrayAttr.get(static_sizes),
        ir.DenseI64ArrayAttr.get(static_strides)).result


def memref_window(view: ir.Value, starts, sizes) -> ir.Value:
    """memref.subview with unit steps; the window keeps the view's strides."""
    view_ty = ir.MemRefType(view.type)
    strides, base_offset = view_ty.get_strides_and_offset()
    static_sizes = [s if isinstance(s, int) else DYNAMIC for s in sizes]
    static_starts = [s if isinstance(s, int) else DYNAMIC_STRIDE for s in starts]
    if all(isinstance(s, int) for s in starts) and base_offset != DYNAMIC_STRIDE and \
            all(s != DYNAMIC_STRIDE for s in strides):
        offset = base_offset + sum(a * b for a, b in zip(starts, strides))
    else:
        offset = DYNAMIC_STRIDE
    ty = ir.MemRefType.get(static_sizes, view_ty.element_type,
                           layout=ir.StridedLayoutAttr.get(offset, list(strides)))
    return memref.SubViewOp(
        ty, view, [s for s in starts if not isinstance(s, int)], [s for s in sizes if not isinstance(s, int)], [],
        ir.DenseI64ArrayAttr.get(static_starts), ir.DenseI64ArrayAttr.get(static_sizes),
        ir.DenseI64ArrayAttr.get([1] * len(sizes))).result


def tensor_window(value: ir.Value, starts, sizes) -> ir.Value:
    ty = ir.RankedTensorType(value.type)
    static_sizes = [s if isinstance(s, int) else DYNAMIC for s in sizes]
    static_starts = [s if isinstance(s, int) else DYNAMIC_STRIDE for s in starts]
    result = ir.RankedTensorType.get(static_sizes, ty.element_type)
    return tensor.ExtractSliceOp(
        result, value, [s for s in starts if not isinstance(s, int)], [s for s in sizes if not isinstance(s, int)],
        [], ir.DenseI64ArrayAttr.get(static_starts), ir.DenseI64ArrayAttr.get(static_sizes),
        ir.DenseI64ArrayAttr.get([1] * len(sizes))).result


def loop_nest(shape, body: Callable[[list], None]) -> None:
    """scf.for loops over every index of `shape`, innermost last; `body` gets the induction variables."""
    def level(d: int, ivs: list):
        if d == len(shape):
            body(ivs)
            return
        loop = scf.ForOp(im.const(0), im.const(shape[d]), im.const(1))
        with ir.InsertionPoint(loop.body):
            level(d + 1, ivs + [loop.induction_variable])
            scf.YieldOp([])
    level(0, [])
