"""Calls of device functions (tt.call), inlined into their callers before the conversion starts.

triton's own inliner leaves two kinds of calls in TTIR: calls of functions marked
`@triton.jit(noinline=True)`, and calls of functions of several blocks (an early `return`) from inside a
loop or an if, whose single-block region cannot take the callee's blocks. On a CPU, noinline is only a
code-size hint, and inlining keeps what the conversion tracks across the call: a pointer argument keeps its
base and strides, so accesses through it stay strided block copies.

    %r = tt.call @f(%x, %p)                 f: ^bb0(%a, %q): ... tt.return %v

A callee of one block is spliced in place of the call (its arguments replaced by the call's operands, the
call's results by the returned values). A callee of several blocks becomes an scf.execute_region holding
its blocks, each tt.return an scf.yield; branches.py converts it. Calls are inlined until none is left
(callees calling callees), and functions nobody calls any more are dropped.

Calls of the smt extension's reserved functions are not inlined: smt_calls.py lowers them as calls.
"""
from __future__ import annotations

from mlir import ir

from ..errors import SpineCompilationError
from .smt_calls import RESERVED_PREFIX

MAX_DEPTH = 64                                 # call chains deeper than this are taken for recursion


def callee_name(call) -> str:
    return ir.FlatSymbolRefAttr(call.attributes["callee"]).value


def _is_reserved(name: str) -> bool:
    return name.startswith(RESERVED_PREFIX)


def _function_name(func_op) -> str:
    return ir.StringAttr(func_op.attributes["sym_name"]).value


def _calls(module: ir.Module, functions: dict) -> list:
    """Every tt.call to an inlinable function, inside the functions that will be converted."""
    found = []

    def visit(op):
        if op.operation.name == "tt.call" and not _is_reserved(callee_name(op)):
            found.append(op.operation)
        return ir.WalkResult.ADVANCE
    for name, func_op in functions.items():
        if not _is_reserved(name):
            func_op.operation.walk(visit)
    return found


def inline_calls(module: ir.Module) -> None:
    functions = {_function_name(op): op for op in module.body.operations if op.operation.name == "tt.func"}
    for _ in range(MAX_DEPTH):
        calls = _calls(module, functions)
        if not calls:
            break
        for call in calls:
            name = callee_name(call)
            if name not in functions:
                raise SpineCompilationError(f"call of an unknown function '{name}'")
            _inline(call, functions[name])
    else:
        raise SpineCompilationError("recursive device function calls are not supported (calls nested more "
                                    f"than {MAX_DEPTH} deep: {callee_name(_calls(module, functions)[0])})")
    _drop_uncalled(module, functions)


def _inline(call, callee) -> None:
    body = callee.operation.clone(ip=False)
    region = body.regions[0]
    entry = region.blocks[0]
    for argument, operand in zip(entry.arguments, call.operands):
        argument.replace_all_uses_with(operand)
    blocks = list(region.blocks)
    if len(blocks) == 1:
        *ops, ret = list(entry.operations)
        for op in ops:
            op.move_before(call)
        returned = list(ret.operands)
    else:
        returned = list(_as_execute_region(call, region).results)
    for result, value in zip(call.results, returned):
        result.replace_all_uses_with(value)
    call.erase()
    body.erase()


def _as_execute_region(call, region: ir.Region):
    """The callee's blocks inside an scf.execute_region at the call, returning through scf.yield."""
    with ir.InsertionPoint(call), call.location:
        holder = ir.Operation.create("scf.execute_region", results=[r.type for r in call.results], regions=1)
    entry = region.blocks[0]
    while len(entry.arguments):
        entry.erase_argument(0)           # replaced by the call's operands already
    for block in list(region.blocks):
        block.append_to(holder.regions[0])
    for block in holder.regions[0].blocks:
        ret = list(block.operations)[-1]
        if ret.operation.name == "tt.return":
            with ir.InsertionPoint(ret), ret.location:
                ir.Operation.create("scf.yield", operands=list(ret.operands))
            ret.operation.erase()
    return holder


def _drop_uncalled(module: ir.Module, functions: dict) -> None:
    """Remove the device functions no call refers to any more (the kernel itself is public)."""
    called = set()

    def visit(op):
        if op.operation.name == "tt.call":
            called.add(callee_name(op))
        return ir.WalkResult.ADVANCE
    module.operation.walk(visit)
    for name, func_op in functions.items():
        visibility = func_op.attributes["sym_visibility"] if "sym_visibility" in func_op.attributes else None
        public = visibility is None or ir.StringAttr(visibility).value == "public"
        if not public and name not in called:
            func_op.operation.erase()
