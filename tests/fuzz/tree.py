"""Expression trees: the nodes a fuzzed kernel computes, their Triton dtypes and tile shapes, and the hypothesis
strategy that draws them.

A node's `shape` is None for a 0-d scalar, else one flag per tile axis: True for the full block, False for
size 1 (a row or column that broadcasts). Every node records the dtype Triton gives its result; the
generated source asserts it (tl.static_assert), so the reference never silently evaluates another type.

The generator avoids undefined behaviour instead of tolerating its results: integer divisors are guarded
against 0 and -1, shift amounts are masked below the bit width, and float-to-integer casts clamp into the
target's range first (tl.maximum/tl.minimum, which also map NaN to the lower bound).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import List, Optional, Tuple

import numpy as np
from hypothesis import strategies as st

from . import dtypes as D
from .dtypes import DType

Shape = Optional[Tuple[bool, ...]]


@dataclass(eq=False)
class Node:
    dtype: DType
    shape: Shape

    def children(self) -> list:
        return []


@dataclass(eq=False)
class Leaf(Node):
    """A value the kernel loads or computes from its arguments before the expression (see kernels.py)."""
    name: str = ""
    spec: object = None


@dataclass(eq=False)
class Const(Node):
    """A Python literal in the source; takes part in promotion as Triton's weakly typed scalars do."""
    value: object = 0


@dataclass(eq=False)
class Unary(Node):
    op: str = ""
    x: Node = None

    def children(self):
        return [self.x]


@dataclass(eq=False)
class Binary(Node):
    op: str = ""
    a: Node = None
    b: Node = None
    compute: DType = None       # the dtype both operands are cast to
    arithmetic_shift: bool = False

    def children(self):
        return [self.a, self.b]


@dataclass(eq=False)
class Where(Node):
    cond: Node = None
    a: Node = None
    b: Node = None

    def children(self):
        return [self.cond, self.a, self.b]


@dataclass(eq=False)
class Fma(Node):
    a: Node = None
    b: Node = None
    c: Node = None

    def children(self):
        return [self.a, self.b, self.c]


@dataclass(eq=False)
class Cast(Node):
    x: Node = None
    bitcast: bool = False

    def children(self):
        return [self.x]


@dataclass(eq=False)
class Broadcast(Node):
    x: Node = None

    def children(self):
        return [self.x]


@dataclass(eq=False)
class Trans(Node):
    """tl.trans of a square 2-D tile."""
    x: Node = None

    def children(self):
        return [self.x]


@dataclass(eq=False)
class JoinSplit(Node):
    """tl.split(tl.join(a, b))[which]: a round trip through a new minor axis of size 2."""
    a: Node = None
    b: Node = None
    which: int = 0

    def children(self):
        return [self.a, self.b]


@dataclass(eq=False)
class Gather(Node):
    """tl.gather(src, index, axis) on full tiles; the index is already inside [0, block)."""
    src: Node = None
    index: Node = None
    axis: int = 0

    def children(self):
        return [self.src, self.index]


@dataclass(eq=False)
class Dot(Node):
    """tl.dot of two square tiles (fp16/bf16/fp32 into fp32, int8 into int32)."""
    a: Node = None
    b: Node = None

    def children(self):
        return [self.a, self.b]


@dataclass(eq=False)
class Reduce(Node):
    op: str = ""                # sum, max, min, argmax, argmin, xor_sum
    x: Node = None
    axis: int = 0
    keep_dims: bool = True      # else re-expanded with [:, None] / [None, :] (2-D) or 0-d (1-D)
    input_dtype: DType = None   # what Triton reduces after its own promotion (bf16 → fp32, ...)

    def children(self):
        return [self.x]


@dataclass(eq=False)
class Scan(Node):
    op: str = ""                # cumsum, cumprod, cummax (tl.associative_scan with a maximum combiner)
    x: Node = None
    axis: int = 0
    reverse: bool = False

    def children(self):
        return [self.x]


@dataclass(eq=False)
class Loop(Node):
    """`acc = init; for k in range(trips): acc = body`, with loads that advance per iteration."""
    init: Node = None
    body: Node = None
    acc: Leaf = None
    index: Leaf = None
    trips: Leaf = None          # the runtime trip count argument
    loads: list = field(default_factory=list)   # Leafs loaded at the top of each iteration
    carried_pointers: bool = False              # loads through pointers advanced each iteration

    def children(self):
        return [self.init, self.body]


# ------------------------------------------------------------------------------------------- typing

def broadcast_shape(*shapes: Shape) -> Shape:
    ranked = [s for s in shapes if s is not None]
    if not ranked:
        return None
    return tuple(any(axis) for axis in zip(*ranked))


def reduce_dtype(op: str, dt: DType) -> DType:
    """The dtype tl.<op> reduces in and returns (triton/language/standard.py)."""
    if op in ("argmax", "argmin"):
        return D.I32
    if op == "sum":
        return (D.I32 if dt.signed else D.U32) if dt.is_int and dt.bits < 32 else dt
    if op in ("max", "min"):
        if dt.bits < 32:
            return D.F32 if dt.is_float else D.I32
        return dt
    return dt


def scan_dtype(op: str, dt: DType) -> DType:
    if op == "cummax":
        return dt
    if dt == D.BF16:
        return D.F32
    if op == "cumsum" and dt.is_int and dt.bits < 32:
        return D.I32 if dt.signed else D.U32
    return dt


# Literals that are exact in every float format (and small enough for every integer type).
FLOAT_LITERALS = (0.5, 1.0, 1.5, 2.0, -1.0, -0.75, 3.0, -2.5, 0.125, 100.0, -1024.0)
MATH_OPS = ("exp", "exp2", "log", "log2", "sin", "cos", "sqrt", "rsqrt", "erf", "floor", "ceil")


def literal_dtype(value) -> DType:
    if isinstance(value, bool):
        return D.BOOL
    if isinstance(value, float):
        return D.F32
    if -2 ** 31 <= value < 2 ** 31:
        return D.I32
    return D.U32 if value < 2 ** 32 else D.I64


def const(value) -> Const:
    return Const(literal_dtype(value), None, value=value)


COMPARISONS = ("<", "<=", ">", ">=", "==", "!=")
EXTREMA = ("max", "min", "max_nan", "min_nan")


def binary(op: str, a: Node, b: Node, div_or_mod: bool = False) -> Binary:
    # Comparisons and tl.maximum/minimum turn literals into tensors first (no weak typing), and
    # tl.maximum/minimum compute bf16 in fp32 (triton/language/core.py).
    weak = op not in COMPARISONS + EXTREMA
    a_dt, b_dt = a.dtype, b.dtype
    if op in EXTREMA:
        a_dt, b_dt = (D.F32 if d == D.BF16 else d for d in (a_dt, b_dt))
    compute = D.promote(a_dt, b_dt, weak and isinstance(a, Const), weak and isinstance(b, Const), div_or_mod)
    if op in COMPARISONS:
        result = D.BOOL
    elif op == "/":
        result = compute if compute.is_float else D.F32
    else:
        result = compute
    return Binary(result, broadcast_shape(a.shape, b.shape), op=op, a=a, b=b, compute=compute,
                  arithmetic_shift=op == ">>" and a.dtype.signed)


def where(cond: Node, a: Node, b: Node) -> Where:
    compute = D.promote(a.dtype, b.dtype, isinstance(a, Const), isinstance(b, Const))
    return Where(compute, broadcast_shape(cond.shape, a.shape, b.shape), cond=cond, a=a, b=b)


def cast(x: Node, dt: DType, bitcast: bool = False) -> Node:
    if x.dtype == dt and not bitcast:
        return x
    return Cast(dt, x.shape, x=x, bitcast=bitcast)


def clamp_bounds(src: DType, dst: DType) -> Tuple[float, float]:
    """The widest [lo, hi] exactly representable in float `src` inside integer `dst`'s range."""
    def inside(limit: int) -> float:
        value = D.fraction_to(Fraction(limit), src)
        value = max(min(value, src.max_finite), -src.max_finite)
        while not dst.int_min <= value <= dst.int_max:
            # One step toward zero: the bit pattern's magnitude less one, for either sign.
            value = float(D.bits_to_float(D.float_bits(np.array([value]), src) - 1, src)[0])
        return value
    return inside(dst.int_min), inside(dst.int_max)


def float_to_int(x: Node, dt: DType) -> Node:
    """A defined float → integer cast: clamp into range (NaN → lo), then convert. The bounds are fp32
    literals (tl.maximum makes literals fp32 tensors), so they must be exact in fp32."""
    lo, hi = clamp_bounds(D.F32, dt)
    low = binary("max", x, const(lo))
    return cast(binary("min", low, const(hi)), dt)


def walk(node: Node, seen=None):
    """Every node reachable from `node` once, children first."""
    seen = set() if seen is None else seen
    if id(node) in seen:
        return
    seen.add(id(node))
    for child in node.children():
        yield from walk(child, seen)
    if isinstance(node, Loop):
        for leaf in [node.acc, node.index, node.trips] + node.loads:
            yield from walk(leaf, seen)
    yield node


# --------------------------------------------------------------------------------------- generation

class Gen:
    """Draws well-typed trees over a pool of leaves. `draw` is hypothesis's; every choice goes through it,
    so examples shrink."""

    def __init__(self, draw, blocks: Tuple[int, ...], leaves: List[Leaf], make_loop=None):
        self.draw = draw
        self.blocks = blocks
        self.rank = len(blocks)
        self.leaves = list(leaves)
        self.make_loop = make_loop      # kernels.py supplies loop leaves; None inside a loop body

    def pick(self, options):
        return self.draw(st.sampled_from(options))

    def flag(self) -> bool:
        return self.draw(st.booleans())

    # ---- entry points
    def expr(self, depth: int) -> Node:
        if depth <= 0:
            return self.leaf()
        kinds = ["leaf", "binary", "binary", "binary", "const_binary", "const_binary", "compare", "where",
                 "unary", "cast", "cast", "math", "reduce", "reduce", "scan", "scan", "fma", "umulhi",
                 "join_split", "gather"]
        if self.rank == 2 and self.blocks[0] == self.blocks[1]:
            kinds.append("trans")
            if self.blocks[0] >= 16:            # tl.dot needs at least 16 x 16
                kinds += ["dot", "dot"]
        if self.make_loop is not None:
            kinds.append("loop")
        kind = self.pick(kinds)
        return getattr(self, f"_{kind}")(depth - 1)

    def dot(self, depth: int, dt) -> Node:
        """tl.dot of two `dt` tiles drawn at `depth` (square blocks of at least 16)."""
        return self._dot(depth, dt)

    def leaf(self) -> Node:
        return self.pick(self.leaves)

    # ---- coercions
    def as_float(self, x: Node, math_only: bool = False) -> Node:
        allowed = (D.F32, D.F64) if math_only else D.FLOATS
        if x.dtype in allowed:
            return x
        target = self.pick(list(allowed))
        return cast(x, target)

    def as_int(self, x: Node, allow_bool: bool = True) -> Node:
        if x.dtype.is_int and (allow_bool or x.dtype != D.BOOL):
            return x
        target = self.pick(list(D.INTS))
        return float_to_int(x, target) if x.dtype.is_float else cast(x, target)

    def as_bool(self, x: Node) -> Node:
        if x.dtype == D.BOOL:
            return x
        if self.flag():
            return cast(x, D.BOOL)
        return binary(self.pick(["<", ">=", "!="]), x, self.literal_for(x.dtype))

    def ranked(self, x: Node) -> Node:
        """x as a tensor with the tile's rank (reductions and scans need an axis)."""
        if x.shape is not None and len(x.shape) == self.rank:
            return x
        shape = tuple(self.flag() for _ in range(self.rank))
        return Broadcast(x.dtype, shape, x=x)

    # ---- literals
    def literal_for(self, other: DType, kind: Optional[str] = None) -> Const:
        """A literal that is valid against an operand of dtype `other` (Triton range-checks literals
        against the promoted type and rejects negative ones against unsigned types)."""
        kind = kind or self.pick(["int", "float"] if other.is_float or self.flag() else ["int"])
        if kind == "float":
            return const(self.pick(list(FLOAT_LITERALS)))
        target = D.promote(other, D.I32, b_const=True)
        if target.is_float:
            return const(self.pick([0, 1, 2, -3, 7, 100]))
        lo, hi = max(target.int_min, -(2 ** 31)), min(target.int_max, 2 ** 31 - 1)
        choices = sorted({v for v in (0, 1, 2, 3, 5, -1, -7, 127, -128, lo, hi) if lo <= v <= hi})
        return const(self.pick(choices))

    # ---- node kinds
    def _leaf(self, depth):
        return self.leaf()

    def _binary(self, depth):
        op = self.pick(["+", "-", "*", "/", "//", "%", "&", "|", "^", "<<", ">>", "max", "min", "max_nan",
                        "min_nan"])
        return self.binary_node(op, self.expr(depth), self.expr(depth))

    def _const_binary(self, depth):
        op = self.pick(["+", "-", "*", "/", "//", "%", "&", "|", "^", "<<", ">>", "max", "min"])
        x = self.expr(depth)
        if op in ("&", "|", "^", "<<", ">>", "//"):
            x = self.as_int(x, allow_bool=op in ("&", "|", "^"))
        if op in ("/", "%") and x.dtype == D.BOOL:
            x = cast(x, self.pick([D.I8, D.U8, D.F32]))     # bool / int: Triton rejects mixed signedness
        if op in ("<<", ">>"):
            return binary(op, x, const(self.draw(st.integers(0, x.dtype.bits - 1))))
        literal = self.literal_for(x.dtype, "int" if x.dtype.is_int and op in ("&", "|", "^", "//", "%") else None)
        if op in ("//", "%") and literal.value in (0, -1):
            literal = const(3)
        if op in ("//", "%") and x.dtype.is_int and literal.dtype.is_int:
            return binary(op, x, literal, div_or_mod=True)
        swapped = self.flag() and op not in ("//", "%", "/")
        a, b = (literal, x) if swapped else (x, literal)
        if op in ("max", "min"):
            return binary(op, a, b)
        return binary(op, a, b, div_or_mod=op in ("/", "%"))

    def binary_node(self, op: str, a: Node, b: Node) -> Node:
        if op in ("&", "|", "^"):
            return binary(op, self.as_int(a), self.as_int(b))
        if op in ("<<", ">>"):
            a, b = self.as_int(a, allow_bool=False), self.as_int(b, allow_bool=False)
            width = D.promote(a.dtype, b.dtype).bits
            return binary(op, a, binary("&", b, const(width - 1)))
        if op in ("//", "%") or (op == "/" and a.dtype.is_int and b.dtype.is_int):
            if op == "//":
                a, b = self.as_int(a), self.as_int(b)
            if a.dtype.is_int and b.dtype.is_int:
                # Triton rejects /, // and % between integers of different signedness.
                if a.dtype.signed != b.dtype.signed or b.dtype == D.BOOL:
                    b = cast(b, a.dtype if a.dtype != D.BOOL else D.U8)
                    a = cast(a, b.dtype) if a.dtype == D.BOOL else a
                if op != "/":
                    b = self.nonzero_divisor(b)
            return binary(op, a, b, div_or_mod=op in ("/", "//", "%"))
        if op in ("max_nan", "min_nan"):
            return binary(op, a, b)
        return binary(op, a, b, div_or_mod=op == "/")

    def nonzero_divisor(self, b: Node) -> Node:
        """b with 0 (and -1 for signed types, whose MIN / -1 overflows) replaced by 3."""
        bad = binary("==", b, const(0))
        if b.dtype.signed:
            bad = binary("|", bad, binary("==", b, const(-1)))
        return where(bad, const(3), b)

    def _compare(self, depth):
        op = self.pick(["<", "<=", ">", ">=", "==", "!="])
        a = self.expr(depth)
        b = self.expr(depth) if self.flag() else self.literal_for(a.dtype)
        return binary(op, a, b)

    def _where(self, depth):
        cond = self.as_bool(self.expr(depth))
        a = self.expr(depth)
        b = self.expr(depth) if self.flag() else self.literal_for(a.dtype)
        return where(cond, a, b) if self.flag() else where(cond, b, a)

    def _unary(self, depth):
        op = self.pick(["neg", "invert", "abs"])
        x = self.expr(depth)
        if op == "invert":
            x = self.as_int(x)
        if op == "neg" and x.dtype == D.BOOL:
            x = cast(x, D.I8)
        return Unary(x.dtype, x.shape, op=op, x=x)

    def _math(self, depth):
        op = self.pick(list(MATH_OPS))
        x = self.as_float(self.expr(depth), math_only=True)
        return Unary(x.dtype, x.shape, op=op, x=x)

    def _cast(self, depth):
        x = self.expr(depth)
        if self.flag() and x.dtype != D.BOOL:
            same_width = [d for d in D.ALL if d.bits == x.dtype.bits and d != x.dtype and d != D.BOOL]
            return cast(x, self.pick(same_width), bitcast=True)
        target = self.pick(list(D.ALL))
        if x.dtype.is_float and target.is_int and target != D.BOOL:
            return float_to_int(x, target)
        return cast(x, target)

    def _fma(self, depth):
        a, b, c = (self.as_float(self.expr(depth)) for _ in range(3))
        dt = D.promote(D.promote(a.dtype, b.dtype), c.dtype)
        a, b, c = (cast(v, dt) for v in (a, b, c))
        return Fma(dt, broadcast_shape(a.shape, b.shape, c.shape), a=a, b=b, c=c)

    def _umulhi(self, depth):
        dt = self.pick([D.I32, D.U32, D.I64, D.U64])
        a, b = (self.as_int(self.expr(depth)) for _ in range(2))
        a, b = cast(a, dt), cast(b, dt)
        return Binary(dt, broadcast_shape(a.shape, b.shape), op="umulhi", a=a, b=b, compute=dt)

    def _reduce(self, depth):
        x = self.ranked(self.expr(depth))
        op = self.pick(["sum", "max", "min", "argmax", "argmin", "xor_sum"])
        if op == "xor_sum":
            x = self.as_int(x)
        axis = self.draw(st.integers(0, self.rank - 1))
        keep = self.flag()
        input_dtype = D.F32 if x.dtype == D.BF16 and op != "sum" else x.dtype
        input_dtype = reduce_dtype(op, input_dtype) if op in ("sum", "max", "min") else input_dtype
        shape = tuple(False if d == axis else s for d, s in enumerate(x.shape))
        if self.rank == 1 and not keep:
            shape = None
        return Reduce(reduce_dtype(op, input_dtype), shape, op=op, x=x, axis=axis, keep_dims=keep,
                      input_dtype=input_dtype)

    def _scan(self, depth):
        x = self.ranked(self.expr(depth))
        op = self.pick(["cumsum", "cumprod", "cummax"])
        if op == "cummax" and x.dtype == D.BF16:
            x = cast(x, D.F32)         # tl.maximum computes bf16 in fp32: the combiner's type would change
        axis = self.draw(st.integers(0, self.rank - 1))
        return Scan(scan_dtype(op, x.dtype), x.shape, op=op, x=x, axis=axis, reverse=self.flag())

    def _trans(self, depth):
        x = self.ranked(self.expr(depth))
        return Trans(x.dtype, x.shape[::-1], x=x)

    def _join_split(self, depth):
        a, b = self.expr(depth), self.expr(depth)
        dt = D.promote(a.dtype, b.dtype)
        return JoinSplit(dt, broadcast_shape(a.shape, b.shape), a=cast(a, dt), b=cast(b, dt),
                         which=self.draw(st.integers(0, 1)))

    def _gather(self, depth):
        full = (True,) * self.rank
        src = self.expr(depth)
        src = src if src.shape == full else Broadcast(src.dtype, full, x=src)
        axis = self.draw(st.integers(0, self.rank - 1))
        index = cast(self.as_int(self.expr(depth), allow_bool=False), D.I32)
        index = binary("%", binary("&", index, const(2 ** 31 - 1)), const(self.blocks[axis]), div_or_mod=True)
        index = index if index.shape == full else Broadcast(D.I32, full, x=index)
        return Gather(src.dtype, full, src=src, index=index, axis=axis)

    def _dot(self, depth, dt=None):
        full = (True,) * self.rank
        dt = dt or self.pick([D.F16, D.BF16, D.F32, D.I8])
        a, b = (self.expr(depth) for _ in range(2))
        a, b = (v if v.dtype == dt else
                (float_to_int(v, dt) if v.dtype.is_float and dt.is_int else cast(v, dt)) for v in (a, b))
        a, b = (v if v.shape == full else Broadcast(dt, full, x=v) for v in (a, b))
        return Dot(D.I32 if dt == D.I8 else D.F32, full, a=a, b=b)

    def _loop(self, depth):
        make_loop, self.make_loop = self.make_loop, None     # one loop per kernel, not nested
        try:
            return make_loop(self, depth)
        finally:
            self.make_loop = None
