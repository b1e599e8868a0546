"""What an ahead-of-time kernel is compiled for: the types of its run-time arguments (`--signature`) and
the values of its compile-time constants (`--constexpr`), matched against the kernel's own parameters.

    --signature "*fp32:16,*fp32,*fp32,i32"   pointers (`*` + element type; `:16` promises a data pointer
                                             or integer divisible by 16), then scalars, in the order of the
                                             kernel's parameters that are not constexprs
    --constexpr BLOCK=1024                   one per constexpr (int, float, True/False)
"""
from __future__ import annotations

from dataclasses import dataclass

# Triton's element types → the C type of one element (fp16, bf16 and fp8 travel as their bits).
C_TYPES = {"i1": "bool", "i8": "int8_t", "i16": "int16_t", "i32": "int32_t", "i64": "int64_t",
           "u1": "bool", "u8": "uint8_t", "u16": "uint16_t", "u32": "uint32_t", "u64": "uint64_t",
           "fp16": "uint16_t", "bf16": "uint16_t", "fp32": "float", "fp64": "double",
           "fp8e4nv": "uint8_t", "fp8e5": "uint8_t", "fp8e4b15": "uint8_t", "fp8e4b8": "uint8_t",
           "fp8e5b16": "uint8_t"}
# Pointers to i1 address bytes, as torch's bool tensors do.
_POINTEE_C_TYPES = {**C_TYPES, "i1": "uint8_t", "u1": "uint8_t"}


class SignatureError(ValueError):
    pass


@dataclass(frozen=True)
class Param:
    """One run-time argument of the kernel, as the C function takes it."""
    name: str
    type: str                 # triton's spelling: "*fp32", "i32"
    divisible_by_16: bool = False

    @property
    def is_pointer(self) -> bool:
        return self.type.startswith("*")

    def c_declaration(self, name: str, written: bool = True) -> str:
        """`float *x_ptr` (`name`: what C calls the parameter); a pointer the kernel never writes through is
        `const`."""
        if self.is_pointer:
            pointee = _POINTEE_C_TYPES[self.type[1:]]
            return f"{'' if written else 'const '}{pointee} *{name}"
        return f"{C_TYPES[self.type]} {name}"


@dataclass(frozen=True)
class KernelSignature:
    params: tuple           # Param for each run-time argument, in order
    constexprs: dict        # name → value
    triton_signature: dict  # every parameter name → triton type or "constexpr", for ASTSource

    def attrs(self) -> dict:
        """triton's specialisation attributes: the divisibility hints, keyed by parameter position."""
        names = list(self.triton_signature)
        return {(names.index(p.name),): [["tt.divisibility", 16]] for p in self.params if p.divisible_by_16}


def parse_type(text: str) -> tuple[str, bool]:
    """`*fp32:16` → ("*fp32", True)."""
    text = text.strip()
    base, _, hint = text.partition(":")
    base = base.strip()
    if hint and hint.strip() != "16":
        raise SignatureError(f"{text!r}: the only hint is ':16' (divisible by 16)")
    element = base[1:] if base.startswith("*") else base
    if element not in C_TYPES:
        raise SignatureError(f"{text!r}: unknown type {element!r}; expected one of {', '.join(C_TYPES)}")
    return base, bool(hint)


def parse_constexpr(text: str) -> tuple[str, object]:
    """`BLOCK=1024` → ("BLOCK", 1024)."""
    name, sep, raw = text.partition("=")
    name, raw = name.strip(), raw.strip()
    if not sep or not name.isidentifier() or not raw:
        raise SignatureError(f"--constexpr {text!r}: expected NAME=VALUE")
    if raw in ("True", "False", "true", "false"):
        return name, raw.lower() == "true"
    for parse in (int, float):
        try:
            return name, parse(raw)
        except ValueError:
            pass
    raise SignatureError(f"--constexpr {text!r}: the value must be an integer, a float, True or False")


def kernel_signature(kernel, signature: str, constexprs: list[str]) -> KernelSignature:
    """Matches the parsed types and constants against `kernel` (a triton JITFunction)."""
    values = dict(parse_constexpr(c) for c in constexprs)
    names = list(kernel.arg_names)
    unknown = [n for n in values if n not in names]
    if unknown:
        raise SignatureError(f"kernel '{kernel.__name__}' has no parameter {', '.join(unknown)} "
                             f"(parameters: {', '.join(names)})")
    missing = [p.name for p in kernel.params if p.is_constexpr and p.name not in values]
    if missing:
        raise SignatureError(f"kernel '{kernel.__name__}': give a value for each constexpr: "
                             + ", ".join(f"--constexpr {n}=..." for n in missing))
    runtime = [n for n in names if n not in values]
    types = [t for t in signature.split(",") if t.strip()] if signature else []
    if len(types) != len(runtime):
        raise SignatureError(f"kernel '{kernel.__name__}': the signature has {len(types)} types for "
                             f"{len(runtime)} run-time parameters ({', '.join(runtime)})")
    params = []
    for name, text in zip(runtime, types):
        typ, hint = parse_type(text)
        params.append(Param(name, typ, hint))
    by_name = {p.name: p.type for p in params}
    triton_signature = {n: by_name.get(n, "constexpr") for n in names}
    return KernelSignature(tuple(params), values, triton_signature)
