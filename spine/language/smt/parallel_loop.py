"""How a loop over `smt.parallel` reaches TTIR: as the very loop `tl.range` would give, its scf.for marked
with the discardable attribute `smt.parallel_arg0`.

triton's code generator builds a `for` loop only from its own `range` class, checked by identity
(`IteratorClass is language.range` in CodeGenerator.visit_For), and offers no hook for a loop's
attributes. So visit_For is wrapped, once, when this module is imported; the wrapper leaves every loop
whose iterator is not `smt.parallel` to triton untouched. For an `smt.parallel` loop it

- lets triton generate the loop from `tl.range` with the same arguments (less `bind_sub_block`, which
  tl.range does not take), by naming tl.range in a private local the rewritten `for` statement calls;
- marks the scf.for through its induction variable: triton's `value.set_attr` on a block argument of a
  loop body sets `<name>_arg<number>` on the loop op, here `smt.parallel_arg0`. The induction variable is
  the value triton binds to the loop's target name last, once the body is generated.

No user code can produce the attribute (triton exposes no way to set attributes), so the conversion never
takes an ordinary loop for a parallel one.
"""
from __future__ import annotations

import ast

from triton.compiler import code_generator as cg
from triton.language import core as tl

from .checks import check

ATTRIBUTE = "smt.parallel"      # on the induction variable; the loop op gets "smt.parallel_arg0"
_RANGE_NAME = "__spine_smt_parallel_range"


MARK = "__spine_smt_parallel__"     # a class attribute of smt.parallel (sync.py)


def install() -> None:
    original = cg.CodeGenerator.visit_For
    if getattr(original, "__spine_parallel_loop__", False):
        return

    def visit_For(self, node):
        if not _is_parallel_loop(self, node):
            return original(self, node)
        return _visit_parallel_for(self, node, original)

    visit_For.__spine_parallel_loop__ = True
    visit_For.__wrapped__ = original
    cg.CodeGenerator.visit_For = visit_For


def _is_parallel_loop(generator, node) -> bool:
    if not isinstance(node.iter, ast.Call) or not isinstance(node.iter.func, (ast.Name, ast.Attribute)):
        return False    # (looking a name up emits no IR; other expressions are left to triton alone)
    try:
        iterator = generator.visit(node.iter.func)
    except Exception:       # let triton report whatever is wrong with the iterator
        return False
    return isinstance(iterator, type) and iterator.__dict__.get(MARK, False)


def _emits_no_ir(expr: ast.expr) -> bool:
    """A literal, a name, or a negated literal: looking these up builds no IR."""
    if isinstance(expr, ast.UnaryOp):
        expr = expr.operand
    return isinstance(expr, (ast.Constant, ast.Name))


def _visit_parallel_for(generator, node, original):
    # spine-triton's parallel(arg1, arg2, step, num_stages, loop_unroll_factor, bind_sub_block)
    keywords = [k for k in node.iter.keywords if k.arg != "bind_sub_block"]
    call = ast.Call(func=ast.Name(id=_RANGE_NAME, ctx=ast.Load()), args=node.iter.args[:5], keywords=keywords)
    loop = ast.For(target=node.target, iter=call, body=node.body, orelse=node.orelse,
                   type_comment=getattr(node, "type_comment", None))
    ast.copy_location(call, node.iter)
    ast.copy_location(loop, node)
    check(isinstance(node.target, ast.Name), "smt.parallel loops take a single loop variable")
    if len(node.iter.args) > 2 and _emits_no_ir(node.iter.args[2]):
        # (other step expressions are built once, by the loop itself: visiting them here would emit them twice)
        step = generator.visit(node.iter.args[2])
        check(not (isinstance(step, tl.constexpr) and step.value < 0), "smt.parallel needs a positive step")
    bound = []

    def set_value(name, value):
        if name == node.target.id:
            bound.append(value)
        type(generator).set_value(generator, name, value)

    had_own = "set_value" in generator.__dict__
    previous = generator.__dict__.get("set_value")
    generator.set_value = set_value
    generator.lscope[_RANGE_NAME] = tl.range
    try:
        original(generator, loop)
    finally:
        if had_own:
            generator.set_value = previous
        else:
            del generator.set_value
        generator.lscope.pop(_RANGE_NAME, None)
    induction_variable = bound[-1].handle
    induction_variable.set_attr(ATTRIBUTE, generator.builder.get_unit_attr())
