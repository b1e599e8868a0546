"""fp8 tensors as bytes: a rewrite of the kernel's TTIR, before the conversion, after which no fp8 type is
left. LLVM has no fp8 types and MLIR's lowering no fp8 arithmetic, so every fp8 value becomes its i8 bit
pattern (pointers to fp8 point to i8), and whatever computes with fp8 values decodes them to f32 first
and encodes results back, with plain arith ops on the bits:

    tt.fp_to_fp x : f8 → f16/bf16/f32/f64    decode (exact: every fp8 value is representable)
    tt.fp_to_fp x : float → f8               encode, rounding to nearest even (or toward zero), saturating
    arith/math ops on f8 (add, max, abs, cmp, ...)   decode the operands, compute in f32, encode the results
    tt.dot with f8 operands                  operands decoded to the accumulator's type (products exact)
    arith.constant of f8                     the constant in f32, encoded
    loads, stores, shape ops, select, bitcasts     unchanged, on bytes

Formats, as triton defines them (exponent bias, and which codes are special):

    fp8e5     f8E5M2          bias 15, IEEE-like: exponent 31 is inf (mantissa 0) or NaN
    fp8e4nv   f8E4M3FN        bias 7, no inf: S.1111.111 is NaN
    fp8e4b15  (i8 in TTIR)    bias 15, no inf: S.1111.111 is NaN (as triton's tests read it; its largest
                              value 1.75 is where triton's GPU conversion saturates too)
    fp8e4b8   f8E4M3FNUZ      bias 8, no inf, no -0: 0x80 is NaN
    fp8e5b16  f8E5M2FNUZ      bias 16, no inf, no -0: 0x80 is NaN

Downcasts follow triton's GPU semantics (cvt.rn.satfinite): out-of-range values and infinities saturate to
the largest finite value, NaN stays NaN. Sources wider than f32 are first rounded to f32 by rounding to odd,
so the one rounding to fp8 is exact. tt.fp_to_fp between standard floats with round-toward-zero (triton's
fp_downcast_rounding="rtz") is handled here too.

triton's frontend keeps fp8e4b15 values as i8 and leaves their casts to the backend, which emits them as
tt.extern_elementwise calls of E4B15_DECODE / E4B15_ENCODE (spine/language/cpu/custom_fp8.py); extern.py
expands those with decode/encode below.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from mlir import ir
from mlir.dialects import arith
from mlir.dialects import math as math_d

from ..errors import SpineCompilationError
from . import elementwise as ew
from .math import f64_to_f32_odd

F8_TYPE = re.compile(r"f8E[0-9]M[0-9][A-Z0-9]*")
RTZ, RTNE = 0, 1                           # triton's rounding attribute of tt.fp_to_fp
KEEP_AS_BYTES = {"arith.select", "arith.bitcast"}    # the same on bytes


@dataclass(frozen=True)
class Format:
    name: str
    exponent_bits: int
    mantissa_bits: int
    bias: int
    specials: str          # "ieee" (inf and NaN at the top exponent), "fn" (only S.1..1.1..1 is NaN),
                           # "fnuz" (0x80 is NaN, no negative zero)
    width: int = 8

    @property
    def exponent_mask(self) -> int:
        return (1 << self.exponent_bits) - 1

    @property
    def max_finite(self) -> float:
        top = self.exponent_mask - (1 if self.specials == "ieee" else 0)
        mantissa = (1 << self.mantissa_bits) - (2 if self.specials == "fn" else 1)
        return (1 + mantissa / (1 << self.mantissa_bits)) * 2.0 ** (top - self.bias)

    @property
    def nan_code(self) -> int:
        return 0x80 if self.specials == "fnuz" else (1 << (self.width - 1)) - 1


FORMATS = {
    "f8E5M2": Format("f8E5M2", 5, 2, 15, "ieee"),
    "f8E4M3FN": Format("f8E4M3FN", 4, 3, 7, "fn"),
    "f8E4M3FNUZ": Format("f8E4M3FNUZ", 4, 3, 8, "fnuz"),
    "f8E5M2FNUZ": Format("f8E5M2FNUZ", 5, 2, 16, "fnuz"),
}
F16 = Format("f16", 5, 10, 15, "ieee", width=16)   # for round-toward-zero to f16
E4B15 = Format("fp8e4b15", 4, 3, 15, "fn")
# The symbols spine/language/cpu/custom_fp8.py emits for fp8e4b15 casts (kept in both places so that
# neither side imports the other).
E4B15_DECODE = "__spine_fp8e4b15_to_fp32"
E4B15_ENCODE = "__spine_to_fp8e4b15_"          # + "rtne" or "rtz"


def e4b15_expansion(symbol: str):
    """The builder for one of the fp8e4b15 cast symbols, None for any other symbol."""
    if symbol == E4B15_DECODE:
        return lambda x: decode(x, E4B15)
    if symbol.startswith(E4B15_ENCODE):
        rounding = RTZ if symbol.endswith("rtz") else RTNE
        return lambda x: encode(to_f32(x, rounding), E4B15, rounding)
    return None


def format_of(ty: ir.Type):
    """The fp8 format of a type's elements, None for other types."""
    elem = ty.element_type if isinstance(ty, ir.ShapedType) else ty
    name = str(elem)
    if not F8_TYPE.fullmatch(name):
        return None
    if name not in FORMATS:
        raise SpineCompilationError(f"unsupported fp8 format {name}")
    return FORMATS[name]


def as_bytes_type(ty: ir.Type) -> ir.Type:
    """The type with every fp8 element type (also inside pointer types) replaced by i8."""
    text = str(ty)
    return ir.Type.parse(F8_TYPE.sub("i8", text)) if F8_TYPE.search(text) else ty


# ------------------------------------------------------------------------------------------ builders

def _i32(): return ir.IntegerType.get_signless(32)
def _f32(): return ir.F32Type.get()


def _pow2(k: ir.Value) -> ir.Value:
    """2^k as f32 for i32 k in the normal exponent range, from the exponent bits."""
    bits = arith.ShLIOp(arith.AddIOp(k, ew.const(k.type, 127)).result, ew.const(k.type, 23)).result
    return arith.BitcastOp(ew.like(k, _f32()), bits).result


def _eq(a: ir.Value, value: int) -> ir.Value:
    return arith.CmpIOp(arith.CmpIPredicate.eq, a, ew.const(a.type, value)).result


def decode(bits: ir.Value, fmt: Format) -> ir.Value:
    """The f32 value of fp8 codes (i8, scalar or tensor), exactly."""
    i32 = ew.like(bits, _i32())
    u = arith.ExtUIOp(i32, bits).result
    m_bits = fmt.mantissa_bits
    sign = arith.ShRUIOp(u, ew.const(i32, 7)).result
    exponent = arith.AndIOp(arith.ShRUIOp(u, ew.const(i32, m_bits)).result, ew.const(i32, fmt.exponent_mask)).result
    mantissa = arith.AndIOp(u, ew.const(i32, (1 << m_bits) - 1)).result
    subnormal = _eq(exponent, 0)
    significand = arith.SelectOp(subnormal, mantissa,
                                 arith.OrIOp(mantissa, ew.const(i32, 1 << m_bits)).result).result
    scale = arith.SubIOp(arith.SelectOp(subnormal, ew.const(i32, 1), exponent).result,
                         ew.const(i32, fmt.bias + m_bits)).result
    magnitude = arith.MulFOp(arith.SIToFPOp(ew.like(bits, _f32()), significand).result, _pow2(scale)).result
    negative = _eq(sign, 1)
    value = arith.SelectOp(negative, arith.NegFOp(magnitude).result, magnitude).result
    f32 = value.type
    nan = ew.const(f32, float("nan"))
    if fmt.specials == "ieee":
        top = _eq(exponent, fmt.exponent_mask)
        inf = arith.SelectOp(negative, ew.const(f32, float("-inf")), ew.const(f32, float("inf"))).result
        value = arith.SelectOp(top, arith.SelectOp(_eq(mantissa, 0), inf, nan).result, value).result
    elif fmt.specials == "fn":
        value = arith.SelectOp(_eq(arith.AndIOp(u, ew.const(i32, 0x7F)).result, 0x7F), nan, value).result
    else:
        value = arith.SelectOp(_eq(u, 0x80), nan, value).result
    return value


def encode(x: ir.Value, fmt: Format, rounding: int = RTNE, saturate_inf: bool = True) -> ir.Value:
    """f32 values (scalar or tensor) as codes of `fmt` (i8, or i16 for F16), rounded to nearest even or
    toward zero. Finite values beyond the range saturate to the largest finite value, and so do
    infinities unless `saturate_inf` is off (then an IEEE format keeps them)."""
    i32 = ew.like(x, _i32())
    f32 = x.type
    m_bits = fmt.mantissa_bits
    bits = arith.BitcastOp(i32, x).result
    sign = arith.ShRUIOp(bits, ew.const(i32, 31)).result
    clamped = arith.MinNumFOp(math_d.AbsFOp(x).result, ew.const(f32, fmt.max_finite)).result
    # The exponent the result will have (that of the smallest normal for values below it) ...
    unbiased = arith.SubIOp(arith.ShRUIOp(arith.BitcastOp(i32, clamped).result, ew.const(i32, 23)).result,
                            ew.const(i32, 127)).result
    exponent = arith.MaxSIOp(unbiased, ew.const(i32, 1 - fmt.bias)).result
    # ... fixes the quantum: the value in units of it is below 2^(M+1), rounded to an integer exactly by
    # f32 arithmetic (adding 2^23 rounds to nearest even) or by floor.
    units = arith.MulFOp(clamped, _pow2(arith.SubIOp(ew.const(i32, m_bits), exponent).result)).result
    if rounding == RTNE:
        big = ew.const(f32, 2.0 ** 23)
        rounded = arith.SubFOp(arith.AddFOp(units, big).result, big).result
    elif rounding == RTZ:
        rounded = math_d.FloorOp(units).result
    else:
        raise SpineCompilationError(f"unsupported rounding mode {rounding}")
    significand = arith.FPToSIOp(i32, rounded).result
    # ((exponent + bias - 1) << M) + significand places normals (significand >= 2^M, a carry to 2^(M+1)
    # included) and subnormals (exponent = 1 - bias) alike.
    code = arith.AddIOp(arith.ShLIOp(arith.AddIOp(exponent, ew.const(i32, fmt.bias - 1)).result,
                                     ew.const(i32, m_bits)).result, significand).result
    signed = arith.OrIOp(code, arith.ShLIOp(sign, ew.const(i32, fmt.width - 1)).result).result
    if fmt.specials == "fnuz":
        signed = arith.SelectOp(_eq(code, 0), code, signed).result        # no negative zero
    is_nan = arith.CmpFOp(arith.CmpFPredicate.UNO, x, x).result
    nan = ew.const(i32, fmt.nan_code)
    if fmt.specials != "fnuz":
        nan = arith.OrIOp(nan, arith.ShLIOp(sign, ew.const(i32, fmt.width - 1)).result).result
    result = arith.SelectOp(is_nan, nan, signed).result
    if not saturate_inf and fmt.specials == "ieee":
        is_inf = arith.CmpFOp(arith.CmpFPredicate.OEQ, math_d.AbsFOp(x).result, ew.const(f32, float("inf"))).result
        inf = arith.OrIOp(ew.const(i32, fmt.exponent_mask << m_bits),
                          arith.ShLIOp(sign, ew.const(i32, fmt.width - 1)).result).result
        result = arith.SelectOp(is_inf, inf, result).result
    return arith.TruncIOp(ew.like(x, ir.IntegerType.get_signless(fmt.width)), result).result


# ------------------------------------------------------------------------ conversions between floats

def to_f32(x: ir.Value, rounding: int = RTNE) -> ir.Value:
    """A standard float as f32: exact from narrower types; from f64 rounded to odd (so that the next
    rounding is exact) or, for round-toward-zero, truncated."""
    elem = ew.element_of(x)
    if isinstance(elem, ir.F32Type):
        return x
    if isinstance(elem, ir.F64Type):
        return f64_to_f32_odd(x) if rounding == RTNE else _f64_to_f32_toward_zero(x)
    return arith.ExtFOp(ew.like(x, _f32()), x).result


def _f64_to_f32_toward_zero(x: ir.Value) -> ir.Value:
    t = arith.TruncFOp(ew.like(x, _f32()), x).result
    back = arith.ExtFOp(x.type, t).result
    away = arith.CmpFOp(arith.CmpFPredicate.OGT, math_d.AbsFOp(back).result, math_d.AbsFOp(x).result).result
    bits = arith.BitcastOp(ew.like(x, _i32()), t).result
    toward = arith.BitcastOp(t.type, arith.SubIOp(bits, ew.const(bits.type, 1)).result).result
    return arith.SelectOp(away, toward, t).result        # a magnitude one step down (inf → largest finite)


def from_f32(x: ir.Value, target: ir.Type) -> ir.Value:
    """f32 values that `target` (a standard float type) represents exactly, in that type."""
    like = ew.like(x, target)
    if isinstance(target, ir.F32Type):
        return x
    if isinstance(target, ir.F64Type):
        return arith.ExtFOp(like, x).result
    return arith.TruncFOp(like, x).result


def _toward_zero(x: ir.Value, target: ir.Type) -> ir.Value:
    """Standard float → narrower standard float, rounded toward zero (IEEE: infinities stay)."""
    x32 = to_f32(x, RTZ)
    if isinstance(target, ir.F32Type):
        return x32
    if isinstance(target, ir.F16Type):
        return arith.BitcastOp(ew.like(x, target), encode(x32, F16, RTZ, saturate_inf=False)).result
    if isinstance(target, ir.BF16Type):
        i32 = ew.like(x, _i32())
        bits = arith.BitcastOp(i32, x32).result
        truncated = arith.ShRUIOp(bits, ew.const(i32, 16)).result
        quiet = arith.OrIOp(truncated, ew.const(i32, 0x40)).result        # a NaN stays a NaN
        is_nan = arith.CmpFOp(arith.CmpFPredicate.UNO, x32, x32).result
        half = arith.TruncIOp(ew.like(x, ir.IntegerType.get_signless(16)),
                              arith.SelectOp(is_nan, quiet, truncated).result).result
        return arith.BitcastOp(ew.like(x, target), half).result
    raise SpineCompilationError(f"unsupported round-toward-zero conversion to {target}")


# --------------------------------------------------------------------------------- the TTIR rewrite

@dataclass
class _Pending:
    """An op to rewrite once every value is retyped: which operands and results were fp8, and how."""
    op: object
    operand_formats: list
    result_formats: list
    result_types: list          # the results' original types
    constant: object = None     # an fp8 arith.constant's value as a float


def rewrite(module: ir.Module) -> None:
    """Replace every fp8 type in the module by bytes and every fp8 computation by decode/compute/encode."""
    pending = []
    seen = []                   # whether any value has an fp8 type (pointers to fp8 included)

    def collect(op):
        name = op.operation.name
        if not seen and (any(F8_TYPE.search(str(r.type)) for r in op.results) or any(
                F8_TYPE.search(str(a.type)) for region in op.regions for b in region.blocks for a in b.arguments)):
            seen.append(True)
        operand_formats = [format_of(v.type) for v in op.operands]
        result_formats = [format_of(r.type) for r in op.results]
        computes = name in ("tt.fp_to_fp", "tt.dot") or \
            (name.startswith(("arith.", "math.")) and name not in KEEP_AS_BYTES)
        if name == "tt.fp_to_fp" or (computes and (any(operand_formats) or any(result_formats))):
            pending.append(_Pending(op.operation, operand_formats, result_formats,
                                    [r.type for r in op.results], _constant_value(op)))
        return ir.WalkResult.ADVANCE
    module.operation.walk(collect)
    if not pending and not seen:
        return
    _retype(module)
    for item in pending:
        _rewrite_op(item)


def _constant_value(op):
    if op.operation.name != "arith.constant" or not format_of(op.results[0].type):
        return None
    attr = op.attributes["value"]
    if isinstance(attr, ir.DenseElementsAttr):
        if not ir.DenseElementsAttr(attr).is_splat:
            raise SpineCompilationError("unsupported: an fp8 constant tensor of different values")
        attr = ir.DenseElementsAttr(attr).get_splat_value()
    return ir.FloatAttr(attr).value


def _retype(module: ir.Module) -> None:
    def visit(op):
        for result in op.results:
            result.set_type(as_bytes_type(result.type))
        for region in op.regions:
            for block in region.blocks:
                for argument in block.arguments:
                    argument.set_type(as_bytes_type(argument.type))
        if op.operation.name == "tt.func":
            fn_type = ir.TypeAttr(op.attributes["function_type"]).value
            op.attributes["function_type"] = ir.TypeAttr.get(as_bytes_type(fn_type))
        return ir.WalkResult.ADVANCE
    module.operation.walk(visit)


def _rewrite_op(item: _Pending) -> None:
    op = item.op
    with ir.InsertionPoint(op), op.location:
        name = op.name
        if name == "arith.constant":
            result = encode(ew.const(ew.like(op.results[0], _f32()), item.constant), item.result_formats[0])
            _replace(op, [result])
        elif name == "tt.fp_to_fp":
            _replace(op, [_convert(op, item)])
        elif name == "tt.dot":
            _decode_dot_operands(op, item)
        else:
            _compute_in_f32(op, item)


def _replace(op, values) -> None:
    for result, value in zip(op.results, values):
        result.replace_all_uses_with(value)
    op.erase()


def _rounding(op) -> int:
    return ir.IntegerAttr(op.attributes["rounding"]).value if "rounding" in op.attributes else RTNE


def _convert(op, item: _Pending) -> ir.Value:
    x = op.operands[0]
    source, target = item.operand_formats[0], item.result_formats[0]
    rounding = _rounding(op)
    value = decode(x, source) if source else to_f32(x, rounding)
    if target:
        return encode(value, target, rounding)
    target_type = item.result_types[0]
    target_elem = target_type.element_type if isinstance(target_type, ir.RankedTensorType) else target_type
    if source:
        return from_f32(value, target_elem)                     # exact
    if rounding == RTZ:
        return _toward_zero(x, target_elem)
    # Round to nearest even between standard floats: what truncf/extf do.
    source_width = ew.element_of(x).width
    if target_elem.width < source_width:
        return arith.TruncFOp(target_type, x).result
    return arith.ExtFOp(target_type, x).result if target_elem.width > source_width else x


def _decode_dot_operands(op, item: _Pending) -> None:
    acc_elem = item.result_types[0].element_type
    for index in (0, 1):
        fmt = item.operand_formats[index]
        if fmt:
            op.operands[index] = from_f32(decode(op.operands[index], fmt), acc_elem)


def _compute_in_f32(op, item: _Pending) -> None:
    """An arith/math op on fp8 values, done in f32 and rounded back (to nearest even) into fp8."""
    operands = [decode(v, fmt) if fmt else v for v, fmt in zip(op.operands, item.operand_formats)]
    result_types = [ew.like(operands[0], _f32()) if fmt else ty
                    for ty, fmt in zip(item.result_types, item.result_formats)]
    attributes = {}
    for attr in ("predicate", "fastmath"):
        if attr in op.attributes:
            attributes[attr] = op.attributes[attr]
    computed = ir.Operation.create(op.name, results=result_types, operands=operands, attributes=attributes)
    _replace(op, [encode(r, fmt) if fmt else r for r, fmt in zip(computed.results, item.result_formats)])
