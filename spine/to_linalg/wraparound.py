"""Remainders that wrap around nowhere in a tile: `%` on an affine index, kept structured under a condition.

Triton's matmul tutorial (and Inductor's and FlagGems' matmul templates after it) keep every row they read
in bounds with a remainder:

    offs_am = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    a_ptrs = a_ptr + offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak

A remainder is not affine, so its tile would be a gather. But it wraps only in a tile that runs past M
(and none does when M is a multiple of the block): wherever `o % M + (BLOCK_M - 1) < M` for the tile's
first row o, the rows are `o % M + i`, affine. So the remainder becomes a WrappedIndex, its affine form
and that run-time condition; arithmetic and pointer offsets keep both, and a load or a store branches:

    %holds = o >= 0 and M > 0 and o % M + BLOCK_M - 1 < M
    scf.if %holds { the strided block copy of the affine form } else { a gather of the exact addresses }

The exact addresses are the affine ones plus a correction (how far back each wrapped row went), computed
only in the gather's branch; a pointer advanced in a loop by affine offsets keeps its correction, so the
K loop carries the affine form's offset alone, as it does without a remainder.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable, Optional

from mlir import ir
from mlir.dialects import arith

from . import index_math as im
from . import materialize
from . import states as st

def remainder(a, m) -> Optional[st.WrappedIndex]:
    """`a % m` (signed or unsigned) for an affine index `a` that varies along one dim with a positive
    constant stride and a uniform `m`, as a WrappedIndex; None for any other remainder."""
    if not (isinstance(a, st.AffineIndex) and isinstance(m, st.AffineIndex)) or a.is_uniform or not m.is_uniform:
        return None
    varying = [d for d, s in enumerate(a.strides) if not im.same(s, 0)]
    if len(varying) != 1 or not isinstance(a.strides[varying[0]], int) or a.strides[varying[0]] <= 0:
        return None
    d = varying[0]
    last = a.strides[d] * (a.shape[d] - 1)           # the tile's last element, from its first
    start, modulus = im.as_value(a.offset), im.as_value(m.offset)
    positive = arith.CmpIOp(arith.CmpIPredicate.sgt, modulus, im.const(0)).result
    divisor = arith.SelectOp(positive, modulus, im.const(1)).result      # no division by zero or less
    first = arith.RemSIOp(start, divisor).result
    non_negative = arith.CmpIOp(arith.CmpIPredicate.sge, start, im.const(0)).result
    inside = arith.CmpIOp(arith.CmpIPredicate.slt, im.as_value(im.add(first, last)), modulus).result
    holds = arith.AndIOp(arith.AndIOp(non_negative, positive).result, inside).result
    return st.WrappedIndex(replace(a, offset=first, exact_value=None), holds)


def arithmetic(name: str, args: list) -> Optional[st.WrappedIndex]:
    """Index arithmetic with a WrappedIndex among its operands: the affine forms combined as st's own
    rules combine AffineIndex, under every operand's condition; None where the structure is lost."""
    if not all(isinstance(a, (st.AffineIndex, st.WrappedIndex)) for a in args) or not args:
        return None
    fast = [a.fast if isinstance(a, st.WrappedIndex) else a for a in args]
    rules = {"arith.addi": st.add_index, "arith.subi": st.sub_index, "arith.muli": st.mul_index}
    if name not in rules or len(fast) != 2:
        return None
    combined = rules[name](fast[0], fast[1])          # a product by a uniform factor only (else None)
    return None if combined is None else st.WrappedIndex(combined, _all_hold(args))


def cast(state: st.WrappedIndex, element_type: ir.Type) -> st.WrappedIndex:
    """An integer cast of the index (the affine form assumed not to overflow, as AffineIndex's casts)."""
    return st.WrappedIndex(replace(state.fast, element_type=element_type, exact_value=None), state.holds)


def _all_hold(states) -> ir.Value:
    conditions = [s.holds for s in states if isinstance(s, (st.WrappedIndex, st.WrappedPointer))]
    holds = conditions[0]
    for other in conditions[1:]:
        holds = arith.AndIOp(holds, other).result
    return holds


def _i64(value: ir.Value) -> ir.Value:
    i64 = ir.IntegerType.get_signless(64)
    ty = ir.RankedTensorType(value.type)
    if ir.IntegerType(ty.element_type).width == 64:
        return value
    return arith.ExtSIOp(ir.RankedTensorType.get(list(ty.shape), i64), value).result


def index_correction(index: st.WrappedIndex) -> Callable[[], ir.Value]:
    """How far the exact values lie from the affine form, element by element (i64)."""
    def correction():
        exact = _i64(index.exact_value())
        return arith.SubIOp(exact, _i64(materialize.affine_tensor(index.fast))).result
    return correction


def offset_pointer(ptr, index) -> Optional[st.WrappedPointer]:
    """tt.addptr where the pointer or the offset is wrapped (the other structured): the affine forms
    added, the corrections summed, the conditions joined. None where the affine forms do not add up."""
    fast_ptr = ptr.fast if isinstance(ptr, st.WrappedPointer) else ptr
    fast_index = index.fast if isinstance(index, st.WrappedIndex) else index
    if not isinstance(fast_ptr, st.PointerState) or not isinstance(fast_index, st.AffineIndex):
        return None
    fast = st.offset_pointer(fast_ptr, fast_index)
    if fast is None or not fast.shape:
        return None
    corrections = []
    if isinstance(ptr, st.WrappedPointer):
        corrections.append(ptr.correction)
    if isinstance(index, st.WrappedIndex):
        corrections.append(index_correction(index))
    if len(corrections) == 1:
        correction = corrections[0]        # the same recipe: a loop's carry compares it by identity
    else:
        first, second = corrections
        correction = lambda: arith.AddIOp(first(), second()).result  # noqa: E731
    return st.WrappedPointer(fast, _all_hold([ptr, index]), correction)


def reshaped(ptr: st.WrappedPointer, fast: st.PointerState, reshape: Callable) -> st.WrappedPointer:
    """The pointer expanded or broadcast: `fast` its new affine form, reshape() applied to the correction."""
    return st.WrappedPointer(fast, ptr.holds, lambda: reshape(ptr.correction()))

