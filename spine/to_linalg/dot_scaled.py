"""tt.dot_scaled (tl.dot_scaled: a microscaled matmul) → each operand decoded and scaled, then tt.dot's
product (dot.py) with the f32 accumulator, the way triton's GPU backends decompose it without native MX
instructions (DecomposeScaledBlocked):

    %d = tt.dot_scaled %a scale %sa, %b scale %sb, %c lhs = e4m3 rhs = e2m1 {fastMath = false}
  becomes
    %a16 = decode(%a) * 2^(%sa - 127)      (one scale per 32 elements along k, bf16 products)
    %b16 = decode(%b) * 2^(%sb - 127)
    %d   = tt.dot's product of %a16 and %b16, plus %c

Operands are computed in bf16, or in f16 when either operand's format is fp16, as triton does: fp8
(e4m3, e5m2) and fp4 (e2m1) values are exact in both; a bf16 operand meeting an fp16 one is rounded to
f16. fp8 operands arrive as bytes (fp8.py's rewrite) and are decoded with fp8.py's decoder; e2m1 values
come two per byte, the first in the low nibble, packed along k unless the op's lhs_k_pack / rhs_k_pack
say along m / n.

Scales are e8m0 bytes, the exponent of a power of two: 2^(s-127), as triton builds it from the bits, so 0
gives 0 and 0xFF infinity; 0xFF means NaN, which the product becomes unless fastMath. The rhs's scales are
[n, k/32] (not transposed, as triton takes them). Each product is rounded once to the compute type (the
f32 product of two such values is exact); in f16 the scale itself is first rounded to f16 as triton does.
"""
from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, linalg, tensor

from . import dot, fp8, smt_dot
from . import elementwise as ew
from .builders import empty, generic, identity_map
from .converter import handles
from .tensor_ops import reassociation
from .types import element_type, shape_of

# triton's ScaleDotElemType; its fp6 formats are not taken (tl.dot_scaled does not accept them either).
FORMATS = {0: "e4m3", 1: "e5m2", 4: "e2m1", 5: "bf16", 6: "fp16"}
FP6 = {2: "e2m3", 3: "e3m2"}
FP8 = {"e4m3": fp8.FORMATS["f8E4M3FN"], "e5m2": fp8.FORMATS["f8E5M2"]}
# e2m1 (no inf, no NaN) decoded by fp8.decode once its sign bit is moved to bit 7: the other bits stay
# where an e2m1 byte has them, so the "fn" NaN code (0x7F) never occurs.
E2M1 = fp8.Format("e2m1", 2, 1, 1, "fn")
GROUP = 32                      # elements along k that share one e8m0 scale
NAN_SCALE = 0xFF


@handles("tt.dot_scaled")
def convert_dot_scaled(conv, op):
    formats = [_format(conv, op, name) for name in ("a_elem_type", "b_elem_type")]
    compute = ir.F16Type.get() if "fp16" in formats else ir.BF16Type.get()
    a, b, acc = (conv.concrete(v) for v in list(op.operands)[:3])
    a_scale, b_scale = _scales(conv, op)
    fast_math = _flag(op, "fastMath", False)
    a = _scaled(conv, op, _decoded(a, formats[0], _packed_dim(op, 0), compute), a_scale, 0, fast_math)
    b = _scaled(conv, op, _decoded(b, formats[1], _packed_dim(op, 1), compute), b_scale, 1, fast_math)
    conv.bind(op.results[0], dot.product(conv, op, a, b, acc, packed=not _rhs_packed_before_loop(op)))


def _format(conv, op, name: str) -> str:
    code = ir.IntegerAttr(op.attributes[name]).value
    if code not in FORMATS:
        raise conv.unsupported(op, f"{FP6[code]} (fp6) operands" if code in FP6 else f"operand format {code}")
    return FORMATS[code]


def _flag(op, name: str, default: bool) -> bool:
    return ir.BoolAttr(op.attributes[name]).value if name in op.attributes else default


def _scales(conv, op) -> list:
    """The lhs and rhs scale tensors (None where the op has none), after a, b and c."""
    present = list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))[3:]
    rest = iter(list(op.operands)[3:])
    return [conv.concrete(next(rest)) if n else None for n in present]


def _k_dim(side: int, rank: int) -> int:
    return rank - 1 if side == 0 else rank - 2


def _packed_dim(op, side: int):
    """The dimension along which an e2m1 operand holds two values per byte: k, or m / n without k-packing."""
    rank = len(shape_of(op.operands[side].type))
    if _flag(op, ("lhs_k_pack", "rhs_k_pack")[side], True):
        return _k_dim(side, rank)
    return rank - 2 if side == 0 else rank - 1


def _rhs_packed_before_loop(op) -> bool:
    """Whether the packed matmul would pack B's panels once before the loop around the op, B being defined
    outside it (smt_dot._b_panels): the decoded B is made here, inside the loop, so it cannot be."""
    loop = smt_dot.enclosing_loop(op)
    return loop is not None and not smt_dot.inside(op.operands[1], loop)


# ----------------------------------------------------------------------------------------- decoding

def _decoded(value: ir.Value, fmt: str, packed_dim: int, compute: ir.Type) -> ir.Value:
    """An operand's values in the compute type (exact but for bf16 rounded to f16)."""
    if fmt == "e2m1":
        return _unpacked_fp4(value, packed_dim, compute)
    if fmt in FP8:
        return ew.truncate_float(fp8.decode(value, FP8[fmt]), compute)
    if element_type(value.type) == compute:
        return value
    return ew.truncate_float(ew.extend_float(value, ir.F32Type.get()), compute)


def _unpacked_fp4(value: ir.Value, dim: int, compute: ir.Type) -> ir.Value:
    """Bytes of two e2m1 values each → their values, twice as many along `dim` (low nibble first): a
    generic over [..., n, 2, ...] picking the nibble by the index of the 2, collapsed to [..., 2n, ...]."""
    shape = list(shape_of(value.type))
    rank = len(shape) + 1
    pairs = shape[:dim + 1] + [2] + shape[dim + 1:]
    source_map = ir.AffineMap.get(rank, 0, [ir.AffineDimExpr.get(d) for d in range(rank) if d != dim + 1])

    def body(byte, _out):
        high = arith.CmpIOp(arith.CmpIPredicate.ne, linalg.IndexOp(dim + 1).result,
                            arith.ConstantOp(ir.IndexType.get(), 0).result).result
        nibble = ew.select(high, arith.ShRUIOp(byte, ew.const(byte.type, 4)).result, byte)
        sign = arith.ShLIOp(arith.AndIOp(nibble, ew.const(byte.type, 0x8)).result, ew.const(byte.type, 4)).result
        code = arith.OrIOp(sign, arith.AndIOp(nibble, ew.const(byte.type, 0x7)).result).result
        return [ew.truncate_float(fp8.decode(code, E2M1), compute)]
    out = empty(pairs, compute)
    values = generic([out.type], [value], [out], [ir.AffineMapAttr.get(source_map), identity_map(rank)], rank,
                     body).results[0]
    groups = [[d] for d in range(dim)] + [[dim, dim + 1]] + [[d] for d in range(dim + 2, rank)]
    shape[dim] *= 2
    return tensor.CollapseShapeOp(ir.RankedTensorType.get(shape, compute), values, reassociation(groups)).result


# ------------------------------------------------------------------------------------------ scaling

def _scaled(conv, op, value: ir.Value, scale, side: int, fast_math: bool) -> ir.Value:
    """value * 2^(scale - 127) in the compute type, one scale per GROUP elements along k: a generic over
    the operand with k split into [k/32, 32], the scale read at (row or column, group)."""
    if scale is None:
        return value
    shape = list(shape_of(value.type))
    rank = len(shape)
    k_dim = _k_dim(side, rank)
    scale_shape = shape_of(scale.type)
    if len(scale_shape) != rank or scale_shape[-1] * GROUP != shape[k_dim]:
        raise conv.unsupported(op, f"scales of shape {list(scale_shape)} for an operand of shape {shape}: "
                                   f"one e8m0 scale per {GROUP} elements along k is supported")
    split = shape[:k_dim] + [shape[k_dim] // GROUP, GROUP] + shape[k_dim + 1:]
    groups = [[d] for d in range(k_dim)] + [[k_dim, k_dim + 1]] + [[d] for d in range(k_dim + 2, rank + 1)]
    compute = element_type(value.type)
    blocks = tensor.ExpandShapeOp(ir.RankedTensorType.get(split, compute), value, reassociation(groups), [],
                                  ir.DenseI64ArrayAttr.get(split)).result
    d = [ir.AffineDimExpr.get(i) for i in range(rank + 1)]
    # lhs [.., m, g, j] reads scale [.., m, g]; rhs [.., g, j, n] reads scale [.., n, g]
    scale_dims = d[:rank - 2] + ([d[rank - 2], d[rank - 1]] if side == 0 else [d[rank], d[rank - 2]])
    scale_map = ir.AffineMap.get(rank + 1, 0, scale_dims)

    def body(x, s, _out):
        return [_scaled_value(x, s, fast_math)]
    out = empty(split, compute)
    scaled = generic([out.type], [blocks, scale], [out],
                     [identity_map(rank + 1), ir.AffineMapAttr.get(scale_map), identity_map(rank + 1)], rank + 1,
                     body).results[0]
    return tensor.CollapseShapeOp(value.type, scaled, reassociation(groups)).result


def _scaled_value(x: ir.Value, s: ir.Value, fast_math: bool) -> ir.Value:
    """One value (compute type) times its e8m0 scale (i8), rounded to the compute type."""
    compute = x.type
    f32 = ir.F32Type.get()
    i32 = ir.IntegerType.get_signless(32)
    bits = arith.ShLIOp(arith.ExtUIOp(i32, s).result, ew.const(i32, 23)).result
    factor = arith.BitcastOp(f32, bits).result
    if isinstance(compute, ir.F16Type):
        factor = ew.extend_float(ew.truncate_float(factor, compute), f32)
    result = ew.truncate_float(arith.MulFOp(ew.extend_float(x, f32), factor).result, compute)
    if fast_math:
        return result
    is_nan_scale = arith.CmpIOp(arith.CmpIPredicate.eq, s, ew.const(s.type, NAN_SCALE)).result
    return ew.select(is_nan_scale, ew.const(compute, float("nan")), result)
