"""The reference: an expression tree evaluated in numpy/torch with Triton's dtype semantics, plus, for every
element, a bound on how far a correct kernel may be from it.

Values live in a 4-D layout (programs along axis 0, block axis 0, programs along axis 1, block axis 1),
broadcast where a value does not vary, so reductions and scans run per program tile exactly as the kernel's.

The bound `err` (float64, same layout) is 0 where the kernel must match bit for bit: integer ops, and float
ops whose IEEE result is correctly rounded (+ - * / sqrt fma casts, min/max, comparisons) on exact operands.
It is positive where Triton leaves freedom:
  * libm-class functions (exp, log, sin, ...): MATH_ULPS units of spacing of the result;
  * float reductions, scans and atomic adds, whose order Triton does not fix: Higham's bound for any
    summation order, gamma(n-1) * sum|x|, and its analogue for products;
and it propagates first-order through later ops (|a'b' - ab| <= (|a|+ea)(|b|+eb) - |a||b|, ...). It is inf
("unknown") where the result is not determined: a comparison or integer cast whose outcome the bound can
flip, NaN payloads seen through bitcasts, the sign of a zero chosen by max/min of +0 and -0 (IEEE allows
either) reaching a division, loads of masked lanes without `other`, overflow that depends on the order.
The comparison skips unknown elements; every other element is checked.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import torch

from . import dtypes as D
from . import tree as T
from .dtypes import DType

# A libm-class function may be 2 ulp off (CUDA's documented bound for expf, sinf, cosf, log2f; the C
# libraries on both targets do better); the reference's own rounding adds half an ulp; `spacing` is at
# least one ulp, so 3 spacings cover both.
MATH_ULPS = 3
EXACT_MATH = ("sqrt", "floor", "ceil")
F64_EPS = 2.0 ** -52


@dataclass
class Ref:
    value: np.ndarray
    err: np.ndarray
    dtype: DType

    @property
    def unknown(self) -> np.ndarray:
        return np.isinf(self.err)


def spacing(value: np.ndarray, dt: DType) -> np.ndarray:
    """At least one ulp of `value` in float format `dt`."""
    return 2.0 * dt.unit_roundoff * np.abs(value) + dt.denorm_min


def gamma(n, dt: DType):
    """Higham's gamma_n for the unit roundoff of `dt`: the relative error bound of n roundings. It holds only
    while n u < 1; past that (a bf16 sum of 256 terms) nothing is bounded, and the bound is infinite."""
    nu = np.asarray(n, dtype=np.float64) * dt.unit_roundoff
    bounded = nu < 1.0
    return np.where(bounded, nu / np.where(bounded, 1.0 - nu, 1.0), np.inf)


def finish(value: np.ndarray, err: np.ndarray, dt: DType) -> np.ndarray:
    """A float bound made safe: an inexact result that is not finite, or could overflow, is unknown."""
    err = np.where(np.isnan(err), np.inf, err)
    with np.errstate(invalid="ignore", over="ignore"):
        safe = np.isfinite(value) & (np.abs(value) + err <= dt.max_finite)
    return np.where((err > 0) & ~safe, np.inf, err)


def rounded(value: np.ndarray, propagated: np.ndarray, dt: DType) -> Ref:
    """A correctly rounded op's result: exact on exact inputs, else propagated error plus one rounding."""
    value = D.round_to(value, dt)
    err = propagated + np.where(propagated > 0, spacing(value, dt), 0.0)
    return Ref(value, finish(value, err, dt), dt)


def unknown_where(mask, *refs) -> np.ndarray:
    """0/inf error: unknown where `mask` or any input is unknown (integer-valued results)."""
    out = np.asarray(mask, dtype=bool)
    for r in refs:
        out = out | r.unknown
    return np.where(out, np.inf, 0.0)


def _ints(value: np.ndarray, dt: DType) -> np.ndarray:
    """Integer values computable with wrapping arithmetic (numpy bool arithmetic is logical, not i1)."""
    return value.astype(np.uint8) if dt == D.BOOL else value


def _from_ints(value: np.ndarray, dt: DType) -> np.ndarray:
    return (value & 1).astype(bool) if dt == D.BOOL else value.astype(dt.numpy)


def _unsigned_bits(value: np.ndarray, dt: DType) -> np.ndarray:
    return value.astype(D.unsigned_twin(dt).numpy) if dt.bits >= 8 else value.astype(np.uint8)


def zero_sign_ambiguous(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a == 0) & (b == 0) & (np.signbit(a) != np.signbit(b))


# ------------------------------------------------------------------------------------------- casts

def convert(r: Ref, dst: DType) -> Ref:
    """Triton's value-preserving cast (`x.to(dst)`, and implicit promotion)."""
    src = r.dtype
    if src == dst:
        return r
    with np.errstate(all="ignore"):
        if src.is_float and dst.is_float:
            if dst.bits > src.bits:                     # widening is exact
                return Ref(r.value, r.err, dst)
            return rounded(r.value, r.err, dst)
        if src.is_float and dst == D.BOOL:
            flips = (r.err > 0) & (np.abs(r.value) <= r.err)
            return Ref(r.value != 0, unknown_where(flips, r), dst)
        if src.is_float:
            # Generated casts clamp into range first; out-of-range lanes can only be unknown ones.
            lo, hi = np.trunc(r.value - r.err), np.trunc(r.value + r.err)
            flips = (lo != hi) | ~np.isfinite(r.value)
            safe = np.where(np.isfinite(r.value), np.clip(r.value, dst.int_min, dst.int_max), 0)
            return Ref(np.trunc(safe).astype(dst.numpy), unknown_where(flips, r), dst)
        if dst.is_float:
            return Ref(D.ints_to_float(r.value, dst), r.err, dst)
        if dst == D.BOOL:
            return Ref(r.value != 0, r.err, dst)
        return Ref(r.value.astype(dst.numpy), r.err, dst)


def bitcast(r: Ref, dst: DType) -> Ref:
    src = r.dtype
    bits = D.float_bits(r.value, src) if src.is_float else r.value.view(D.signed_twin(src).numpy)
    value = D.bits_to_float(bits, dst) if dst.is_float else bits.view(dst.numpy)
    # NaN payloads are the implementation's choice (x86 and RISC-V default NaNs differ).
    nan = np.isnan(r.value) if src.is_float else False
    err = np.where(nan | (r.err > 0), np.inf, 0.0)
    return Ref(value, err, dst)


# ----------------------------------------------------------------------------------------- the walk

class Evaluator:
    def __init__(self, env: dict, blocks: tuple, grid: tuple, slice_of):
        self.env = env                   # Leaf -> Ref
        self.blocks = blocks             # (B0,) or (B0, B1)
        self.grid = grid
        self.slice_of = slice_of         # (loop-load Leaf, iteration) -> Ref
        self.memo: dict = {}

    def eval(self, node: T.Node) -> Ref:
        key = id(node)
        if key not in self.memo:
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")       # numpy's integer-overflow warnings: wrapping is meant
                r = getattr(self, f"_{type(node).__name__.lower()}")(node)
            self.memo[key] = Ref(np.asarray(r.value), np.asarray(r.err, dtype=np.float64), r.dtype)
        return self.memo[key]

    def layout_shape(self, shape) -> tuple:
        """The 4-D layout of a value of kernel shape `shape`, every program's tile materialised."""
        g0, g1 = self.grid[0], self.grid[1] if len(self.grid) > 1 else 1
        b = [self.blocks[d] if shape is not None and shape[d] else 1 for d in range(len(self.blocks))]
        return (g0, b[0], g1, b[1] if len(b) > 1 else 1)

    def full(self, r: Ref, shape) -> Ref:
        target = self.layout_shape(shape)
        return Ref(np.broadcast_to(r.value, target).copy(), np.broadcast_to(r.err, target).copy(), r.dtype)

    # ---- leaves
    def _leaf(self, node):
        return self.env[node]

    def _const(self, node):
        value = node.value
        if isinstance(value, float):
            return Ref(np.array(value), np.array(0.0), D.F64)     # exact; converted where it is used
        return Ref(np.array(value, dtype=object), np.array(0.0), node.dtype)

    def operand(self, node: T.Node, dt: DType) -> Ref:
        """A node's value as dtype `dt` (literals are converted exactly, as Triton builds them in `dt`)."""
        r = self.eval(node)
        if isinstance(node, T.Const):
            if dt.is_float:
                return Ref(np.array(float(node.value)), np.array(0.0), dt)
            if dt == D.BOOL:
                return Ref(np.array(bool(node.value)), np.array(0.0), dt)
            return Ref(np.array(int(node.value)).astype(dt.numpy), np.array(0.0), dt)
        return convert(r, dt)

    # ---- elementwise
    def _unary(self, node):
        x = self.eval(node.x)
        v, dt = x.value, x.dtype
        if node.op == "neg":
            if dt.is_float:
                return Ref(-v, x.err, dt)
            return Ref(_from_ints(np.zeros_like(_ints(v, dt)) - _ints(v, dt), dt), x.err, dt)
        if node.op == "invert":
            return Ref(~v, x.err, dt)
        if node.op == "abs":
            if dt.is_float:
                return Ref(np.abs(v), x.err, dt)
            return Ref(np.abs(v) if dt.signed else v, x.err, dt)
        return self.math(node.op, x)

    def math(self, op: str, x: Ref) -> Ref:
        fn = {"exp": torch.exp, "exp2": torch.exp2, "log": torch.log, "log2": torch.log2, "sin": torch.sin,
              "cos": torch.cos, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt, "erf": torch.erf,
              "floor": torch.floor, "ceil": torch.ceil}[op]

        def f(v):
            return fn(torch.from_numpy(np.ascontiguousarray(v, dtype=np.float64))).numpy()
        exact = f(x.value)
        value = D.round_to(exact, x.dtype)
        if op in ("sin", "cos"):
            propagated = np.minimum(x.err, 2.0)          # 1-Lipschitz
        else:                                             # monotone: the image of [v - e, v + e]
            propagated = np.maximum(np.abs(f(x.value + x.err) - exact), np.abs(f(x.value - x.err) - exact))
            propagated = np.where(x.err > 0, propagated, 0.0)
        if op in EXACT_MATH:
            err = propagated + np.where(propagated > 0, spacing(value, x.dtype), 0.0)
            return Ref(value, finish(value, err, x.dtype), x.dtype)
        err = finish(value, propagated + MATH_ULPS * spacing(value, x.dtype), x.dtype)
        # Special cases IEEE and C fix exactly: non-finite inputs, domain errors, overflow well past the max.
        determined = (~np.isfinite(x.value) | np.isnan(exact) |
                      (np.abs(exact) > x.dtype.max_finite * (1 + 8 * x.dtype.unit_roundoff)))
        return Ref(value, np.where(determined & (x.err == 0), 0.0, err), x.dtype)

    def _binary(self, node):
        if node.op == "umulhi":
            return self.umulhi(node)
        dt = node.compute
        if node.op == "/" and not dt.is_float:
            dt = D.F32                                   # int / int divides in fp32
        a, b = self.operand(node.a, dt), self.operand(node.b, dt)
        if node.op in ("<", "<=", ">", ">=", "==", "!="):
            return self.compare(node.op, a, b)
        if dt.is_float:
            return self.float_binary(node.op, a, b, dt)
        return self.int_binary(node, a, b, dt)

    def compare(self, op: str, a: Ref, b: Ref) -> Ref:
        fn = {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal, "==": np.equal,
              "!=": np.not_equal}[op]
        value = fn(a.value, b.value)
        if a.dtype.is_float:
            slack = a.err + b.err
            flips = (slack > 0) & ~(np.abs(a.value - b.value) > slack)
            return Ref(value, unknown_where(flips, a, b), D.BOOL)
        return Ref(value, unknown_where(False, a, b), D.BOOL)

    def float_binary(self, op: str, a: Ref, b: Ref, dt: DType) -> Ref:
        x, y, ex, ey = a.value, b.value, a.err, b.err
        if op in ("+", "-"):
            return rounded(x + y if op == "+" else x - y, ex + ey, dt)
        if op == "*":
            return rounded(x * y, (np.abs(x) + ex) * (np.abs(y) + ey) - np.abs(x * y), dt)
        if op == "/":
            ay = np.abs(y)
            propagated = np.where(ey >= ay, np.inf, (np.abs(x) * ey + ay * ex) / (ay * (ay - ey)))
            r = rounded(x / y, np.where((ex == 0) & (ey == 0), 0.0, propagated), dt)
            # x / 0 is +-inf or NaN by the sign of the zero, which max/min of +-0 leave open.
            return Ref(r.value, np.where(y == 0, np.inf, r.err), dt)
        if op == "%":
            return Ref(np.fmod(x, y), np.where((ex > 0) | (ey > 0), np.inf, 0.0), dt)
        # max, min (maxnum/minnum: NaN loses) and max_nan, min_nan (NaN wins)
        fn = {"max": np.fmax, "min": np.fmin, "max_nan": np.maximum, "min_nan": np.minimum}[op]
        err = np.where(zero_sign_ambiguous(x, y), np.inf, np.maximum(ex, ey))
        value = fn(x, y)
        return Ref(value, finish(value, err, dt), dt)

    def int_binary(self, node, a: Ref, b: Ref, dt: DType) -> Ref:
        op, x, y = node.op, _ints(a.value, dt), _ints(b.value, dt)
        err = unknown_where(False, a, b)
        if op in ("+", "-", "*"):
            value = x + y if op == "+" else x - y if op == "-" else x * y
        elif op in ("&", "|", "^"):
            value = x & y if op == "&" else x | y if op == "|" else x ^ y
        elif op in ("max", "min", "max_nan", "min_nan"):
            value = np.maximum(x, y) if op.startswith("max") else np.minimum(x, y)
        elif op in ("//", "%"):
            value = self.int_divide(op, x, y, dt)
        elif op in ("<<", ">>"):
            value = self.shift(op, x, y, dt, node.arithmetic_shift)
        else:
            raise ValueError(op)
        return Ref(_from_ints(np.asarray(value), dt), err, dt)

    @staticmethod
    def int_divide(op, x, y, dt):
        """Division truncating toward zero and the remainder with the dividend's sign (C, LLVM)."""
        y = np.where(y == 0, 1, y).astype(x.dtype)          # only unknown lanes can hold 0
        if not dt.signed:
            return x // y if op == "//" else x % y
        remainder = np.fmod(x, y)
        if op == "%":
            return remainder
        return ((x - remainder) // y).astype(x.dtype)

    @staticmethod
    def shift(op, x, y, dt, arithmetic):
        """Shifts on the unsigned bit patterns (well defined in numpy), amounts already < width."""
        width = dt.bits
        u = _unsigned_bits(x, dt)
        amount = (_unsigned_bits(y, dt) % width).astype(u.dtype)
        ones = np.array(-1).astype(u.dtype)
        if op == "<<":
            out = u << amount
        else:
            out = u >> amount
            if arithmetic:
                negative = (u >> np.array(width - 1).astype(u.dtype)) & 1
                out = out | np.where(negative == 1, ~(ones >> amount), 0).astype(u.dtype)
        return out.astype(dt.numpy)

    def umulhi(self, node) -> Ref:
        dt = node.dtype
        a, b = self.operand(node.a, dt), self.operand(node.b, dt)
        ua, ub = np.broadcast_arrays(_unsigned_bits(a.value, dt), _unsigned_bits(b.value, dt))
        high = [(int(p) * int(q)) >> dt.bits for p, q in zip(ua.reshape(-1), ub.reshape(-1))]
        value = np.array(high, dtype=D.unsigned_twin(dt).numpy).reshape(ua.shape).astype(dt.numpy)
        return Ref(value, unknown_where(False, a, b), dt)

    def _where(self, node):
        cond = self.eval(node.cond)
        a, b = self.operand(node.a, node.dtype), self.operand(node.b, node.dtype)
        value = np.where(cond.value, a.value, b.value)
        err = np.where(cond.value, a.err, b.err)
        return Ref(value, np.where(cond.unknown, np.inf, err), node.dtype)

    def _fma(self, node):
        dt = node.dtype
        a, b, c = (self.operand(n, dt) for n in (node.a, node.b, node.c))
        x, y, z = np.broadcast_arrays(a.value, b.value, c.value)
        flat = []
        for p, q, r in zip(x.reshape(-1), y.reshape(-1), z.reshape(-1)):
            if np.isfinite(p) and np.isfinite(q) and np.isfinite(r):
                exact = Fraction(float(p)) * Fraction(float(q)) + Fraction(float(r))
                flat.append(D.fraction_to(exact, dt) if exact != 0 else float(p) * float(q) + float(r))
            else:
                flat.append(float(p) * float(q) + float(r))
        value = np.array(flat, dtype=np.float64).reshape(x.shape)
        propagated = (np.abs(x) + a.err) * (np.abs(y) + b.err) - np.abs(x * y) + c.err
        err = propagated + np.where(propagated > 0, spacing(value, dt), 0.0)
        return Ref(value, finish(value, err, dt), dt)

    def _cast(self, node):
        x = self.eval(node.x)
        return bitcast(x, node.dtype) if node.bitcast else convert(x, node.dtype)

    def _broadcast(self, node):
        return self.eval(node.x)

    def _trans(self, node):
        x = self.full(self.eval(node.x), node.x.shape)
        return Ref(np.swapaxes(x.value, 1, 3), np.swapaxes(x.err, 1, 3), x.dtype)

    def _joinsplit(self, node):
        return self.eval(node.b if node.which else node.a)

    def _gather(self, node):
        full = (True,) * len(self.blocks)
        src, index = self.full(self.eval(node.src), full), self.full(self.eval(node.index), full)
        axis = self.axis_of(node.axis)
        where = np.clip(index.value, 0, src.value.shape[axis] - 1).astype(np.intp)   # unknown lanes: any
        value = np.take_along_axis(src.value, where, axis)
        err = np.take_along_axis(src.err, where, axis)
        return Ref(value, np.where(index.unknown, np.inf, err), src.dtype)

    def _dot(self, node):
        """Per program tile, sum_k a[i, k] b[k, j]: exact for int8 (no int32 overflow at these sizes); for
        floats the products are exact in float64 and the sum's order is free: Higham's bound."""
        full = (True,) * len(self.blocks)
        a, b = self.full(self.eval(node.a), full), self.full(self.eval(node.b), full)
        product = lambda x, y: np.einsum("piqk,pkqj->piqj", x, y)       # noqa: E731
        unknown = product(np.isinf(a.err).astype(np.float64), np.ones_like(b.err)) + \
            product(np.ones_like(a.err), np.isinf(b.err).astype(np.float64))
        if not node.dtype.is_float:
            value = product(a.value.astype(np.int64), b.value.astype(np.int64)).astype(np.int32)
            return Ref(value, np.where(unknown > 0, np.inf, 0.0), node.dtype)
        k = a.value.shape[3]
        finite = np.isfinite(a.value).all(axis=3, keepdims=True) & np.isfinite(b.value).all(axis=1, keepdims=True)
        x, y = np.where(np.isfinite(a.value), a.value, 0.0), np.where(np.isfinite(b.value), b.value, 0.0)
        exact = product(x, y)
        magnitude = product(np.abs(x) + a.err, np.abs(y) + b.err)
        value = D.round_to(exact, node.dtype)
        err = (magnitude - product(np.abs(x), np.abs(y))) + \
            (gamma(k, node.dtype) + k * F64_EPS) * magnitude + spacing(value, node.dtype)
        err = np.where(finite & (magnitude * (1 + gamma(k, node.dtype)) <= node.dtype.max_finite), err, np.inf)
        return Ref(value, finish(value, err, node.dtype), node.dtype)

    # ---- reductions and scans
    def axis_of(self, tile_axis: int) -> int:
        return 1 + 2 * tile_axis

    def _reduce(self, node):
        x = convert(self.full(self.eval(node.x), node.x.shape), node.input_dtype)
        axis = self.axis_of(node.axis)
        n = x.value.shape[axis]
        v, e, dt = x.value, x.err, x.dtype
        if node.op in ("argmax", "argmin"):
            return self.arg_extreme(node.op, x, axis)
        if node.op == "xor_sum":
            return Ref(np.bitwise_xor.reduce(v, axis=axis, keepdims=True),
                       np.max(e, axis=axis, keepdims=True), dt)
        if node.op == "sum":
            if not dt.is_float:
                value = np.sum(_ints(v, dt), axis=axis, keepdims=True, dtype=_ints(v, dt).dtype)
                return Ref(_from_ints(value, dt), np.max(e, axis=axis, keepdims=True), dt)
            return self.float_sum(v, e, dt, axis, n, cumulative=False)
        if not dt.is_float:
            fn = np.max if node.op == "max" else np.min
            return Ref(fn(v, axis=axis, keepdims=True), np.max(e, axis=axis, keepdims=True), dt)
        fn = np.fmax if node.op == "max" else np.fmin
        value = fn.reduce(v, axis=axis, keepdims=True)
        mixed_zeros = (value == 0) & np.any((v == 0) & np.signbit(v), axis=axis, keepdims=True) & \
            np.any((v == 0) & ~np.signbit(v), axis=axis, keepdims=True)
        err = np.where(mixed_zeros, np.inf, np.max(e, axis=axis, keepdims=True))
        return Ref(value, finish(value, err, dt), dt)

    def float_sum(self, v, e, dt, axis, n, cumulative: bool) -> Ref:
        """Sums (or prefix sums) in an order Triton leaves open: Higham's bound for any order."""
        acc = (lambda a: np.cumsum(a, axis=axis)) if cumulative else \
            (lambda a: np.sum(a, axis=axis, keepdims=True))
        count = np.arange(1, n + 1).reshape([-1 if d == axis else 1 for d in range(v.ndim)]) if cumulative else n
        finite = np.where(np.isfinite(v), v, 0.0)
        exact = acc(v)
        magnitude = acc(np.abs(finite))
        value = D.round_to(exact, dt)
        bound = (gamma(np.maximum(count - 1, 0), dt) + count * F64_EPS) * magnitude
        err = acc(e) + bound + np.where(count > 1, spacing(value, dt), 0.0)
        # Non-finite terms give a determined inf or NaN unless a finite partial sum could overflow first.
        nonfinite = acc((~np.isfinite(v)).astype(np.float64)) > 0
        overflow = magnitude * (1 + gamma(count, dt)) > dt.max_finite
        err = np.where(nonfinite & (acc(e) == 0), 0.0, finish(value, err, dt))
        return Ref(value, np.where(overflow, np.inf, err), dt)

    def arg_extreme(self, op: str, x: Ref, axis: int) -> Ref:
        v, e = x.value, x.err
        if x.dtype.is_float:
            key = v if op == "argmax" else -v
            winner = np.argmax(np.where(np.isnan(key), -np.inf, key), axis=axis)
        else:
            winner = np.argmax(v, axis=axis) if op == "argmax" else np.argmin(v, axis=axis)
        winner = np.expand_dims(winner, axis)
        unknown = np.any(np.isinf(e), axis=axis, keepdims=True)
        if x.dtype.is_float:
            best, best_err = np.take_along_axis(key, winner, axis), np.take_along_axis(e, winner, axis)
            index = np.arange(v.shape[axis]).reshape([-1 if d == axis else 1 for d in range(v.ndim)])
            rival = (index != winner) & (key + e >= best - best_err) & ((e > 0) | (best_err > 0))
            # NaN makes Triton's combiner order-dependent.
            unknown = unknown | np.any(rival | np.isnan(v), axis=axis, keepdims=True)
        return Ref(winner.astype(np.int32), np.where(unknown, np.inf, 0.0), D.I32)

    def _scan(self, node):
        x = convert(self.full(self.eval(node.x), node.x.shape), node.dtype)
        axis = self.axis_of(node.axis)
        if node.reverse:
            x = Ref(np.flip(x.value, axis), np.flip(x.err, axis), x.dtype)
        r = self.scan(node.op, x, axis)
        if node.reverse:
            r = Ref(np.flip(r.value, axis).copy(), np.flip(r.err, axis).copy(), r.dtype)
        return r

    def scan(self, op: str, x: Ref, axis: int) -> Ref:
        v, e, dt = x.value, x.err, x.dtype
        n = v.shape[axis]
        running_unknown = np.maximum.accumulate(e, axis=axis)
        if not dt.is_float:
            if dt == D.BOOL:
                fn = {"cumsum": np.logical_xor, "cumprod": np.logical_and, "cummax": np.logical_or}[op]
                return Ref(fn.accumulate(v, axis=axis), running_unknown, dt)
            if op == "cummax":
                return Ref(np.maximum.accumulate(v, axis=axis), running_unknown, dt)
            fn = np.cumsum if op == "cumsum" else np.cumprod
            return Ref(fn(v, axis=axis, dtype=v.dtype), running_unknown, dt)
        if op == "cumsum":
            return self.float_sum(v, e, dt, axis, n, cumulative=True)
        if op == "cummax":
            value = np.fmax.accumulate(v, axis=axis)
            seen_neg = np.logical_or.accumulate((v == 0) & np.signbit(v), axis=axis)
            seen_pos = np.logical_or.accumulate((v == 0) & ~np.signbit(v), axis=axis)
            err = np.where((value == 0) & seen_neg & seen_pos, np.inf, running_unknown)
            return Ref(value, finish(value, err, dt), dt)
        return self.float_product(v, e, dt, axis, n)

    def float_product(self, v, e, dt, axis, n) -> Ref:
        """Prefix products in any order: relative gamma(k-1), plus underflow's absolute error scaled by the
        largest factors, plus the propagated bound prod(|x|+e) - prod|x|."""
        count = np.arange(1, n + 1).reshape([-1 if d == axis else 1 for d in range(v.ndim)])
        exact = np.cumprod(v, axis=axis)
        value = D.round_to(exact, dt)
        magnitude = np.cumprod(np.abs(v), axis=axis)
        widened = np.cumprod(np.abs(v) + e, axis=axis)
        big = np.cumprod(np.maximum(np.abs(v) + e, 1.0), axis=axis)
        err = (widened - magnitude) + (gamma(count - 1, dt) + count * F64_EPS) * widened + \
            count * dt.denorm_min * big + np.where(count > 1, spacing(value, dt), 0.0)
        err = np.where(count == 1, e, err)
        nonfinite = np.logical_or.accumulate(~np.isfinite(v), axis=axis)
        # A partial product (in whatever order) is at most the product of the factors above 1.
        may_overflow = big * (1 + gamma(count, dt)) > dt.max_finite
        err = np.where((nonfinite | may_overflow) & (count > 1), np.inf, finish(value, err, dt))
        return Ref(value, err, dt)

    # ---- loops
    def _loop(self, node):
        acc = self.eval(node.init)
        trips = int(np.asarray(self.env[node.trips].value).reshape(-1)[0])
        outer = dict(self.memo)
        for k in range(trips):
            self.memo = dict(outer)
            self.env[node.acc] = acc
            self.env[node.index] = Ref(np.array(k, dtype=np.int32), np.array(0.0), D.I32)
            for leaf in node.loads:
                self.env[leaf] = self.slice_of(leaf, k)
            acc = self.eval(node.body)
        self.memo = outer
        return acc
