"""proton.record (triton.profiler.language.enter_scope / exit_scope, with instrumentation on): a call into
the runtime's profile buffers (cpp/profile_buffers.c), which reads the target's counter (rdtsc on x86-64,
rdtime on riscv64) and appends to the calling thread's own buffer, without a lock:

    "proton.record"() <{isStart, name = "load"}>   →   spine_proton_record(&"load", 1, pid_x, pid_y, pid_z)
    "proton.record"() <{name = "load"}>            →   spine_proton_record(&"load", 0, pid_x, pid_y, pid_z)

The main process marks a module whose records should become code (`spine.proton_scopes`, see
compiler/backend.py); without the mark (TRITON_DISABLE_PROTON=1) records are dropped and the kernel
compiles exactly as if it had none.

The call is opaque to LLVM, so memory accesses stay on their side of it; pure arithmetic on tensors may
still move across a scope boundary (elementwise ops fuse into the loads or stores that use them)."""
from __future__ import annotations

from mlir import ir
from mlir.dialects import arith

from .converter import handles
from .debug_ops import string_address

RECORD_FUNCTION = "spine_proton_record"
MODULE_MARK = "spine.proton_scopes"


def _module_of(op) -> ir.Operation:
    parent = op.operation.parent
    while parent is not None and parent.name != "builtin.module":
        parent = parent.parent
    return parent


def records_wanted(op) -> bool:
    module = _module_of(op)
    if module is None:
        return False
    try:
        return bool(ir.BoolAttr(module.attributes[MODULE_MARK]).value)
    except (KeyError, ValueError):
        return False


def _is_start(op) -> bool:
    try:
        op.attributes["isStart"]  # a unit attribute: present at enter_scope, absent at exit_scope
    except KeyError:
        return False
    return True


@handles("proton.record")
def convert_record(conv, op):
    if not records_wanted(op):
        return
    name = string_address(conv, ir.StringAttr(op.attributes["name"]).value)
    is_start = arith.ConstantOp(ir.IntegerType.get_signless(32), int(_is_start(op))).result
    conv.call(RECORD_FUNCTION, [name, is_start, *conv.program_ids[:3]])
