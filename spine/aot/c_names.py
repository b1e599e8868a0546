"""Which names may appear in generated C. A Triton parameter is any Python identifier, and many of those
(`int`, `default`, `true`, `new`, `INT32_MAX`) are C or C++ keywords or macros of the headers a library's
header includes. The wrapper behind each function therefore names nothing after the user; the header keeps
a parameter's own name where a C or C++ compiler reads it as that name, and spells the others `spine_argN`
(`spine_` names are refused from users, so these never collide)."""
from __future__ import annotations

import re
from dataclasses import dataclass

# C23 and C++20 keywords: the header is read by both (it has an extern "C" block).
KEYWORDS = frozenset("""
    alignas alignof auto bool break case char const constexpr continue default do double else enum extern
    false float for goto if inline int long nullptr register restrict return short signed sizeof static
    static_assert struct switch thread_local true typedef typeof typeof_unqual union unsigned void volatile
    while asm
    and and_eq bitand bitor catch char8_t char16_t char32_t class compl concept consteval constinit const_cast
    co_await co_return co_yield decltype delete dynamic_cast explicit export friend mutable namespace new
    noexcept not not_eq operator or or_eq private protected public reinterpret_cast requires static_cast
    template this throw try typeid typename using virtual wchar_t xor xor_eq
""".split())

# Names the header's prototypes use, object-like macros of the C library a program commonly includes
# before it, and macros GNU C modes predefine (`linux` is 1 there).
TAKEN = frozenset("""
    grid_x grid_y grid_z NULL EOF errno stdin stdout stderr linux unix i386
""".split())

_C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# INT32_MAX, SIZE_MAX, FLT_MIN, INT64_WIDTH...: <stdint.h>/<limits.h>/<float.h> macros.
_LIMIT_MACRO = re.compile(r"[A-Z][A-Z0-9_]*_(MAX|MIN|WIDTH)")
SPINE_PREFIX = "spine_"


def unusable(name: str) -> str | None:
    """Why `name` cannot be used as a name in generated C, or None if it can."""
    if not _C_IDENTIFIER.fullmatch(name):
        return "not an ASCII C identifier"
    if name in KEYWORDS:
        return "a C or C++ keyword"
    if name.startswith("__") or re.match(r"_[A-Z]", name) or "__" in name:
        return "reserved for the compiler and C library"
    if name.endswith("_t"):
        return "reserved for type names (POSIX)"
    if name in TAKEN or _LIMIT_MACRO.fullmatch(name):
        return "a name the header or the headers it includes define"
    if name.lower().startswith(SPINE_PREFIX):
        return "Spine's own prefix"
    return None


@dataclass(frozen=True)
class ParamName:
    """A kernel parameter's name in the header's prototype, and why it differs from its own (or None)."""
    c_name: str
    reason: str | None


def prototype_names(names: list[str]) -> list[ParamName]:
    return [ParamName(n, None) if (why := unusable(n)) is None else ParamName(f"spine_arg{i}", why)
            for i, n in enumerate(names)]


def check_function_names(names: list[str]) -> None:
    """C function names are the library's interface and cannot be renamed: refuse the unusable."""
    bad = [f"{n!r} ({why})" for n in names if (why := unusable(n))]
    if bad:
        raise ValueError(f"not usable as a C function name: {', '.join(bad)}; choose another with --name")


def check_library_name(name: str) -> None:
    """The library's name becomes file names and the header's include guard."""
    if not _C_IDENTIFIER.fullmatch(name):
        raise ValueError(f"{name!r}: a library's name is an ASCII C identifier (letters, digits, _)")
