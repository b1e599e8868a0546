"""Argument checks shared by the smt builtins. A failed check raises ValueError, which triton's frontend
reports as a compilation error pointing at the kernel's source line."""
from __future__ import annotations

from typing import Optional

from triton.language import core as tl


def check(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


def constant(value) -> Optional[int]:
    """The value of a compile-time integer (an int or a constexpr int), None for a run-time value."""
    value = tl._unwrap_if_constexpr(value)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def static_ints(values, what: str) -> tuple:
    """A shape or tile size, which must be known at compile time."""
    values = tl._unwrap_if_constexpr(values)
    out = tuple(constant(v) for v in values)
    check(all(v is not None for v in out), f"{what} must be compile-time integers, got {values}")
    return out


def dims(x: tl.tensor) -> tuple:
    """A tensor's shape as ints (tensor shapes hold constexprs)."""
    return tuple(tl._unwrap_if_constexpr(d) for d in x.shape)
