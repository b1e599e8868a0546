"""libdevice's integer and bit-level functions as arith/math ops (scalars or tensors): counting and
reversing bits, byte permutes, high halves of products, 24-bit products, sums of absolute differences,
halving adds, float classification, and the bits of doubles as two ints."""
from __future__ import annotations

from mlir import ir
from mlir.dialects import arith
from mlir.dialects import math as math_d

from . import elementwise as ew
from .elementwise import const_like, element_of, like


def _i32_result(value: ir.Value) -> ir.Value:
    """libdevice returns bit counts as int32 for 64-bit arguments too."""
    if element_of(value).width == 32:
        return value
    return arith.TruncIOp(like(value, ew.int_type(32)), value).result


def clz(x):
    return _i32_result(math_d.CountLeadingZerosOp(x).result)


def popc(x):
    return _i32_result(math_d.CtPopOp(x).result)


def ffs(x):
    """1 + the index of the lowest set bit, 0 for 0."""
    found = arith.AddIOp(math_d.CountTrailingZerosOp(x).result, const_like(x, 1)).result
    return _i32_result(ew.select(ew.icmp(arith.CmpIPredicate.eq, x, const_like(x, 0)), const_like(x, 0), found))


def brev(x):
    """The bits in reverse order: swap halves of ever smaller groups (log2(width) steps)."""
    width = element_of(x).width
    shift, mask = width // 2, (1 << (width // 2)) - 1
    while shift:
        m = const_like(x, mask)                        # below 2^(width-1): a valid signed attribute
        s = const_like(x, shift)
        low = arith.ShLIOp(arith.AndIOp(x, m).result, s).result
        high = arith.AndIOp(arith.ShRUIOp(x, s).result, m).result
        x = arith.OrIOp(low, high).result
        shift //= 2
        mask ^= mask << shift if shift else 0
    return x


def byte_perm(x, y, selector):
    """Byte i of the result is byte (selector >> 4i) & 7 of the eight bytes y:x (x the low four)."""
    i64 = like(x, ew.int_type(64))
    pair = arith.OrIOp(arith.ShLIOp(arith.ExtUIOp(i64, y).result, ew.const(i64, 32)).result,
                       arith.ExtUIOp(i64, x).result).result
    result = const_like(x, 0)
    for i in range(4):
        index = arith.AndIOp(arith.ShRUIOp(selector, const_like(selector, 4 * i)).result,
                             const_like(selector, 7)).result
        byte = arith.ShRUIOp(pair, arith.ExtUIOp(i64, arith.MulIOp(index, const_like(index, 8)).result).result).result
        byte = arith.AndIOp(arith.TruncIOp(x.type, byte).result, const_like(x, 0xFF)).result
        result = arith.OrIOp(result, arith.ShLIOp(byte, const_like(x, 8 * i)).result).result
    return result


def mulhi(a, b, signed: bool):
    return (arith.MulSIExtendedOp if signed else arith.MulUIExtendedOp)(a, b).high


def mul24(a, b, signed: bool):
    """The low 32 bits of the product of the low 24 bits (sign-extended for signed)."""
    def low24(v):
        if signed:
            return arith.ShRSIOp(arith.ShLIOp(v, const_like(v, 8)).result, const_like(v, 8)).result
        return arith.AndIOp(v, const_like(v, 0xFFFFFF)).result
    return arith.MulIOp(low24(a), low24(b)).result


def sad(a, b, c, signed: bool):
    """|a - b| + c, the difference taken without overflow."""
    i64 = like(a, ew.int_type(64))
    extend = arith.ExtSIOp if signed else arith.ExtUIOp
    d = arith.SubIOp(extend(i64, a).result, extend(i64, b).result).result
    magnitude = math_d.AbsIOp(d).result
    return arith.AddIOp(arith.TruncIOp(a.type, magnitude).result, c).result


def hadd(a, b, signed: bool, round_up: bool):
    """(a + b) >> 1 without overflow; rounded up for rhadd."""
    half = (arith.ShRSIOp if signed else arith.ShRUIOp)(arith.XOrIOp(a, b).result, const_like(a, 1)).result
    if round_up:
        return arith.SubIOp(arith.OrIOp(a, b).result, half).result
    return arith.AddIOp(arith.AndIOp(a, b).result, half).result


def hiloint2double(hi, lo):
    i64 = like(hi, ew.int_type(64))
    joined = arith.OrIOp(arith.ShLIOp(arith.ExtUIOp(i64, hi).result, ew.const(i64, 32)).result,
                         arith.ExtUIOp(i64, lo).result).result
    return ew.from_bits(joined, ir.F64Type.get())


def double2loint(x):
    return arith.TruncIOp(like(x, ew.int_type(32)), ew.bits(x)).result


def double2hiint(x):
    b = ew.bits(x)
    return arith.TruncIOp(like(x, ew.int_type(32)), arith.ShRUIOp(b, const_like(b, 32)).result).result


def bitcast(x, result_type: ir.Type):
    return arith.BitcastOp(result_type, x).result


def as_int32(flag):
    return arith.ExtUIOp(like(flag, ew.int_type(32)), flag).result


def signbit(x):
    b = ew.bits(x)
    return _i32_result(arith.ShRUIOp(b, const_like(b, element_of(b).width - 1)).result)


def saturatef(x):
    """x clamped to [0, 1]; NaN gives 0."""
    positive = ew.fcmp(arith.CmpFPredicate.OGT, x, const_like(x, 0.0))
    return ew.select(positive, arith.MinNumFOp(x, const_like(x, 1.0)).result, const_like(x, 0.0))


def fdim(x, y):
    """x - y if x > y, else +0; NaN if either is NaN."""
    difference = ew.select(ew.fcmp(arith.CmpFPredicate.OGT, x, y), arith.SubFOp(x, y).result, const_like(x, 0.0))
    return ew.select(ew.either(ew.is_nan(x), ew.is_nan(y)), arith.AddFOp(x, y).result, difference)


def rcp64h(x):
    """1/x with the low 32 bits of the result cleared: the high word of the reciprocal."""
    b = ew.bits(arith.DivFOp(const_like(x, 1.0), x).result)
    return ew.from_bits(arith.AndIOp(b, const_like(b, -(1 << 32))).result, ir.F64Type.get())
