"""arith and math ops. Tensor arith is legal upstream MLIR (the lowering turns it into linalg.generic),
so most ops are cloned as they are. Integer and mask arithmetic on recognised states stays symbolic:

    %o = arith.addi %pid_times_block, %range   → AffineIndex(offset pid*B, stride 1)
    %m = arith.cmpi slt, %o, %n_splat          → MaskState(dim 0 in [0, n - pid*B))
"""
from __future__ import annotations

from dataclasses import replace

from mlir import ir

from . import index_math as im
from . import states as st
from . import wraparound
from .converter import handles, handles_dialects
from .pointer_select import convert_pointer_select
from .types import element_type, is_bool, shape_of

_PREDICATES = {0: "eq", 1: "ne", 2: "slt", 3: "sle", 4: "sgt", 5: "sge", 6: "ult", 7: "ule", 8: "ugt", 9: "uge"}
_CASTS = ("arith.extsi", "arith.extui", "arith.trunci", "arith.index_cast", "arith.index_castui")


def _symbolic_result(conv, op):
    """The state of the op's result when its structure survives, else None."""
    name = op.operation.name
    args = [conv.state(v) for v in op.operands]
    if any(isinstance(a, st.WrappedIndex) for a in args):
        if name in _CASTS and len(args) == 1 and not is_bool(op.results[0].type):
            return wraparound.cast(args[0], element_type(op.results[0].type))
        return wraparound.arithmetic(name, args)
    if name in ("arith.remsi", "arith.remui") and len(args) == 2:
        return wraparound.remainder(args[0], args[1])
    if all(isinstance(a, st.AffineIndex) for a in args) and args:
        a = args[0]
        if name == "arith.addi":
            return st.add_index(a, args[1])
        if name == "arith.subi":
            return st.sub_index(a, args[1])
        if name == "arith.muli":
            return st.mul_index(a, args[1])
        if name in _CASTS and not is_bool(op.results[0].type):
            return replace(a, element_type=element_type(op.results[0].type), exact_value=None)
        if name == "arith.cmpi":
            pred = _PREDICATES[ir.IntegerAttr(op.attributes["predicate"]).value]
            return st.compare_to_mask(pred, a, args[1])
    if name == "arith.andi" and len(args) == 2 and all(isinstance(a, st.MaskState) for a in args):
        return st.and_masks(args[0], args[1])
    return None


def _all_uniform(states) -> bool:
    return all(isinstance(s, st.SplatValue) or (isinstance(s, st.AffineIndex) and s.is_uniform)
               for s in states) and len(states) > 0


def _scalar_of(state) -> ir.Value:
    if isinstance(state, st.SplatValue):
        return state.scalar
    if state.exact_value is not None:
        from mlir.dialects import tensor
        return tensor.ExtractOp(state.exact_value(), [im.const(0)] * len(state.shape)).result
    return im.to_integer(state.offset, state.element_type)


_FOLDS = {"arith.addi": lambda a, b: a + b, "arith.subi": lambda a, b: a - b, "arith.muli": lambda a, b: a * b}


def _wrapped(value: int, ty: ir.Type) -> int:
    """`value` as the (signed) value of integer type `ty` it wraps to."""
    if not isinstance(ty, ir.IntegerType):
        return value
    half = 1 << (ty.width - 1)
    return (value + half) % (2 * half) - half


def _static_fold(op, states, shape):
    """Splats of compile-time integers combine at compile time, wrapping in their type."""
    fold = _FOLDS.get(op.operation.name)
    if fold is None or not all(isinstance(s, st.AffineIndex) and isinstance(s.offset, int) for s in states):
        return None
    ty = element_type(op.results[0].type)
    return st.AffineIndex(shape, _wrapped(fold(states[0].offset, states[1].offset), ty), (0,) * len(shape), ty)


def _uniform_result(conv, op):
    """An elementwise op over splats is the splat of the op over scalars."""
    states = [conv.state(v) for v in op.operands]
    if not _all_uniform(states) or len(op.results) != 1:
        return None
    shape = shape_of(op.results[0].type)
    folded = _static_fold(op, states, shape)
    if folded is not None:
        return folded
    scalars = [_scalar_of(s) for s in states]
    scalar_op = ir.Operation.create(op.operation.name, results=[element_type(op.results[0].type)],
                                    operands=scalars, attributes=_inherent_attributes(op))
    scalar = scalar_op.results[0]
    if is_bool(scalar.type):
        return st.uniform_mask(scalar, shape)
    if isinstance(scalar.type, ir.IntegerType):
        return st.AffineIndex(shape, im.from_integer(scalar), (0,) * len(shape), scalar.type)
    return st.SplatValue(shape, scalar)


def _inherent_attributes(op) -> dict:
    """The properties arith and math ops carry. Properties are not enumerable from Python, so they are
    read by name; any other would take its default, which for these ops is the unflagged form."""
    names = ("predicate", "fastmath", "overflowFlags", "roundingmode", "isExact")
    out = {}
    for name in names:
        try:
            out[name] = op.attributes[name]
        except KeyError:
            pass
    return out


@handles_dialects("arith.", "math.")
def convert_elementwise(conv, op):
    if op.operation.name == "arith.extf":
        total = conv.wide_sums.get(conv.concrete(op.operands[0]))
        if total is not None and element_type(total.type) == element_type(op.results[0].type):
            conv.bind(op.results[0], total)     # a half-precision sum widened back: not rounded between
            return
    state = None
    if isinstance(op.results[0].type if len(op.results) else None, ir.RankedTensorType):
        state = _uniform_result(conv, op)            # splats: the op itself, in the TTIR type
    if state is None:
        state = _symbolic_result(conv, op)
        if isinstance(state, (st.AffineIndex, st.MaskState, st.WrappedIndex)):
            # Index arithmetic does not wrap like the TTIR integer type; as data, recompute the op.
            state = replace(state, exact_value=lambda: _recomputed(conv, op))
    if state is not None:
        conv.bind(op.results[0], state)
        return
    conv.clone(op)


def _recomputed(conv, op) -> ir.Value:
    """The op cloned on concrete operands at the insertion point: its result exactly as TTIR defines it."""
    operands = [conv.concrete(v) for v in op.operands]
    new = op.operation.clone()
    for i, v in enumerate(operands):
        new.operands[i] = v
    return new.results[0]


@handles("tt.mulhiui")
def convert_mulhiui(conv, op):
    """tl.umulhi: the high half of the double-width unsigned product."""
    from mlir.dialects import arith
    a, b = (conv.concrete(v) for v in op.operands)
    conv.bind(op.results[0], arith.MulUIExtendedOp(a, b).high)


@handles("arith.select")
def convert_select(conv, op):
    # select between pointers is not elementwise arithmetic: keep it out of the clone path
    if any(isinstance(conv.state(v), (st.PointerState, st.GatherPointer, st.IntegerAddress))
           for v in op.operands[1:]):
        return convert_pointer_select(conv, op)
    convert_elementwise(conv, op)


# Float ops rewritten before the lowering sees them (ceil, exp2, conversions to bf16) register there.
from . import math  # noqa: E402,F401
