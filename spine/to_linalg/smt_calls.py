"""tt.call: calls to the reserved smt functions (spine/language/smt/reference.py) become their lowerings;
any other call is an unsupported non-inlined device function.

The smt frontend reaches TTIR through noinline device functions whose symbols start with the reserved
prefix below, followed by the function's name and triton's mangling of its argument types:

    %p = tt.call @"spine.language.smt.reference.pack__fp32S32_16S__(1,)cconstexpr_8__(2,)cconstexpr_8_"(%x)

The kind (`pack`) picks the lowering; the bodies of those functions are never converted. Which module
lowers which kind:

    slice2d, slice4d, pack, unpack      smt_views.py
    dot, dot_acc                        smt_dot.py
    scratch                             smt_scratch.py
"""
from __future__ import annotations

from typing import Callable, Dict, Optional

from mlir import ir

from .converter import handles

# The module path of spine/language/smt (kept here too so the conversion need not import triton).
RESERVED_PREFIX = "spine.language.smt."

LOWERINGS: Dict[str, Callable] = {}


def lowers(*kinds: str):
    def register(fn):
        for kind in kinds:
            LOWERINGS[kind] = fn
        return fn
    return register


def callee(op) -> str:
    return ir.FlatSymbolRefAttr(op.attributes["callee"]).value


def reserved_kind(symbol: str) -> Optional[str]:
    """`pack` for `spine.language.smt.reference.pack__...`; None for any other symbol."""
    if not symbol.startswith(RESERVED_PREFIX):
        return None
    qualified = symbol[len(RESERVED_PREFIX):].split("__", 1)[0]
    return qualified.rsplit(".", 1)[-1]


def is_reserved_function(func_op) -> bool:
    """Whether a tt.func is one of the reserved smt functions (present only as the target of calls)."""
    return reserved_kind(ir.StringAttr(func_op.attributes["sym_name"]).value) is not None


def kind_of(op) -> Optional[str]:
    """The smt kind of a TTIR op: the reserved call's kind, None for anything else."""
    if op.operation.name != "tt.call":
        return None
    return reserved_kind(callee(op))


@handles("tt.call")
def convert_call(conv, op):
    kind = reserved_kind(callee(op))
    lowering = LOWERINGS.get(kind) if kind is not None else None
    if lowering is None:
        raise conv.unsupported(op, f"a call of '{callee(op)}': non-inlined device function calls are not "
                                   f"supported yet")
    lowering(conv, op)
