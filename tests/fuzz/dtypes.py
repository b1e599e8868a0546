"""The dtypes the fuzzer generates, Triton's promotion rules for them, and exact conversions between them.

Reference values are numpy arrays: integers in numpy's fixed-width type of the same width and signedness
(whose arithmetic wraps, documented; torch has no unsigned 16/32/64-bit arithmetic), floats of every width
as float64 holding a value that is exactly representable in the kernel's dtype. `round_to` is the one
place a float64 becomes a narrower format, correctly rounded (round to nearest even), so +, -, *, / and
sqrt computed in float64 and rounded once give the correctly rounded result of the narrow format
(float64 has more than 2p+2 bits for p <= 24, which makes the double rounding innocuous).
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import torch


@dataclass(frozen=True)
class DType:
    name: str          # triton's name, tl.<name>
    kind: str          # "bool", "int" (signed), "uint" or "float"
    bits: int

    @property
    def tl(self) -> str:
        return f"tl.{self.name}"

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_int(self) -> bool:
        """Integer in Triton's sense: bool (int1, unsigned) included."""
        return self.kind != "float"

    @property
    def signed(self) -> bool:
        return self.kind == "int"

    @property
    def numpy(self):
        """The numpy type reference values of this dtype are held in."""
        if self.is_float:
            return np.float64
        if self.kind == "bool":
            return np.bool_
        return np.dtype(f"{'' if self.signed else 'u'}int{self.bits}").type

    @property
    def torch(self):
        """The torch dtype a tensor argument of this dtype has, or None (stored bitcast to signed)."""
        return TORCH_STORAGE.get(self.name)

    # ---- float formats
    @property
    def mantissa(self) -> int:
        return FLOAT_FORMATS[self.name][0]

    @property
    def unit_roundoff(self) -> float:
        return 2.0 ** -self.mantissa

    @property
    def max_finite(self) -> float:
        return FLOAT_FORMATS[self.name][2]

    @property
    def denorm_min(self) -> float:
        return 2.0 ** (FLOAT_FORMATS[self.name][1] - self.mantissa + 1)

    # ---- integer ranges
    @property
    def int_min(self) -> int:
        return -(1 << (self.bits - 1)) if self.signed else 0

    @property
    def int_max(self) -> int:
        return (1 << (self.bits - 1)) - 1 if self.signed else (1 << self.bits) - 1

    def __repr__(self) -> str:
        return self.name


BOOL = DType("int1", "bool", 1)
I8, I16, I32, I64 = (DType(f"int{b}", "int", b) for b in (8, 16, 32, 64))
U8, U16, U32, U64 = (DType(f"uint{b}", "uint", b) for b in (8, 16, 32, 64))
F16, BF16, F32, F64 = DType("float16", "float", 16), DType("bfloat16", "float", 16), \
    DType("float32", "float", 32), DType("float64", "float", 64)

ALL = (BOOL, I8, I16, I32, I64, U8, U16, U32, U64, F16, BF16, F32, F64)
FLOATS = (F16, BF16, F32, F64)
INTS = (I8, I16, I32, I64, U8, U16, U32, U64)
# dtypes a kernel argument can have (torch has no unsigned tensors wider than 8 bits worth passing)
STORABLE = (BOOL, I8, I16, I32, I64, U8, F16, BF16, F32, F64)

# name -> (mantissa bits with the implicit one, minimum normal exponent, largest finite value)
FLOAT_FORMATS = {
    "float16": (11, -14, 65504.0),
    "bfloat16": (8, -126, float.fromhex("0x1.fep127")),
    "float32": (24, -126, float.fromhex("0x1.fffffep127")),
    "float64": (53, -1022, float.fromhex("0x1.fffffffffffffp1023")),
}
TORCH_STORAGE = {"int1": torch.bool, "int8": torch.int8, "int16": torch.int16, "int32": torch.int32,
                 "int64": torch.int64, "uint8": torch.uint8, "float16": torch.float16,
                 "bfloat16": torch.bfloat16, "float32": torch.float32, "float64": torch.float64}


def signed_twin(dt: DType) -> DType:
    """The signed integer dtype of the same width (how unsigned results are stored)."""
    return {8: I8, 16: I16, 32: I32, 64: I64}[dt.bits]


def unsigned_twin(dt: DType) -> DType:
    return {8: U8, 16: U16, 32: U32, 64: U64}[dt.bits]


def int_of_width(bits: int) -> DType:
    return {16: I16, 32: I32, 64: I64}[bits]


# ------------------------------------------------------------------------------------- type promotion
# Mirrors triton/language/semantic.py (computation_type_impl, integer_promote_impl) of the pinned triton.
# Every generated kernel asserts the dtype of each value with tl.static_assert, so a disagreement shows up
# as a frontend error, never as a silent reference mismatch.

_KIND_ORDER = {"bool": 0, "int": 1, "uint": 1, "float": 2}


def integer_promote(a: DType, b: DType) -> DType:
    if a.signed == b.signed:
        return a if a.bits > b.bits else b
    unsigned, signed = (a, b) if not a.signed else (b, a)
    return unsigned if unsigned.bits >= signed.bits else signed


def promote(a: DType, b: DType, a_const: bool = False, b_const: bool = False, div_or_mod: bool = False) -> DType:
    """The dtype both operands of a binary op are cast to. `*_const`: the operand is a Python literal,
    which (as in torch) does not take part when its kind is not above the tensor's."""
    if a_const != b_const:
        const, tensor = (a, b) if a_const else (b, a)
        if _KIND_ORDER[const.kind] <= _KIND_ORDER[tensor.kind]:
            if div_or_mod and tensor in (F16, BF16):
                return F32
            return tensor
    if F64 in (a, b):
        return F64
    if F32 in (a, b):
        return F32
    if F16 in (a, b):
        return F32 if div_or_mod else F16
    if a == b == BF16:
        return F32 if div_or_mod else BF16
    if BF16 in (a, b):
        return F32
    return integer_promote(a, b)


# ------------------------------------------------------------------------------------ exact rounding

def round_to(x: np.ndarray, dt: DType) -> np.ndarray:
    """float64 values correctly rounded (to nearest even) to the float format `dt`, as float64."""
    x = np.asarray(x, dtype=np.float64)
    if dt == F64:
        return x
    if dt == F32:
        with np.errstate(over="ignore"):
            return x.astype(np.float32).astype(np.float64)
    # float64 -> float32 rounding to odd, then to the 16-bit format to nearest even: exact overall,
    # since float32 keeps more than p + 1 bits of either 16-bit format.
    with np.errstate(over="ignore", invalid="ignore"):
        narrow = x.astype(np.float32)
        inexact = np.isfinite(x) & (narrow.astype(np.float64) != x)
        toward_zero = np.where(np.abs(narrow.astype(np.float64)) > np.abs(x),
                               np.nextafter(narrow, np.float32(0)), narrow)
        bits = toward_zero.view(np.uint32) | inexact.astype(np.uint32)
        odd = np.where(inexact, bits.view(np.float32), narrow)
    half = torch.float16 if dt == F16 else torch.bfloat16
    return torch.from_numpy(np.ascontiguousarray(odd)).to(half).double().numpy().reshape(x.shape)


def fraction_to(q: Fraction, dt: DType) -> float:
    """An exact rational correctly rounded to `dt` (as a float)."""
    try:
        nearest = float(q)                  # correctly rounded to float64 (Python's int/int division)
    except OverflowError:
        return float("inf") if q > 0 else float("-inf")
    if dt == F64 or Fraction(nearest) == q:
        return float(round_to(np.float64(nearest), dt))
    # Round to odd at float64, then once to the narrow format.
    toward_zero = nearest if abs(Fraction(nearest)) < abs(q) else float(np.nextafter(nearest, 0.0))
    bits = np.array([toward_zero]).view(np.uint64) | np.uint64(1)
    return float(round_to(bits.view(np.float64), dt)[0])


def ints_to_float(values: np.ndarray, dt: DType) -> np.ndarray:
    """Integers (any numpy integer type) correctly rounded to the float format `dt`."""
    values = np.asarray(values)
    if values.dtype == np.bool_ or (np.abs(values.astype(np.float64)) < 2.0 ** 53).all():
        return round_to(values.astype(np.float64), dt)         # exact in float64 first
    flat = [fraction_to(Fraction(int(v)), dt) for v in values.reshape(-1)]
    return np.array(flat, dtype=np.float64).reshape(values.shape)


def float_bits(values: np.ndarray, dt: DType) -> np.ndarray:
    """The bit patterns of float values of dtype `dt`, as the signed integer type of the same width."""
    if dt == F64:
        return values.astype(np.float64).view(np.int64)
    if dt == F32:
        return values.astype(np.float32).view(np.int32)
    if dt == F16:
        return values.astype(np.float16).view(np.int16)
    return (values.astype(np.float32).view(np.uint32) >> np.uint32(16)).astype(np.uint16).view(np.int16)


def bits_to_float(bits: np.ndarray, dt: DType) -> np.ndarray:
    """Inverse of float_bits: signed integers of the width of `dt` reinterpreted as `dt`, as float64."""
    if dt == F64:
        return bits.astype(np.int64).view(np.float64)
    if dt == F32:
        return bits.astype(np.int32).view(np.float32).astype(np.float64)
    if dt == F16:
        return bits.astype(np.int16).view(np.float16).astype(np.float64)
    widened = bits.astype(np.int16).view(np.uint16).astype(np.uint32) << np.uint32(16)
    return widened.view(np.float32).astype(np.float64)


def to_torch(values: np.ndarray, dt: DType) -> torch.Tensor:
    """Reference values as a tensor of the dtype a kernel argument of `dt` has."""
    if dt.is_float:
        return torch.from_numpy(np.ascontiguousarray(values, dtype=np.float64)).to(dt.torch)
    return torch.from_numpy(np.ascontiguousarray(values.astype(dt.numpy))).to(dt.torch)


def from_torch(tensor: torch.Tensor, dt: DType) -> np.ndarray:
    """A kernel's output tensor of dtype `dt` as reference values."""
    if dt.is_float:
        return tensor.double().numpy()
    return tensor.numpy().astype(dt.numpy)
