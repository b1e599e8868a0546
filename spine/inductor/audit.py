"""What a compiled graph runs: the Triton kernels Inductor's generated `call` launches, and anything else it
calls that computes (an ATen fallback, an extern kernel such as aten.mm, a custom op), read from the
generated Python modules.

Calls that only allocate, reinterpret or check buffers are neither."""
import ast
from dataclasses import dataclass, field

# Inductor's wrapper helpers that compute nothing
_BOOKKEEPING = {
    "empty_strided_cpu", "empty_strided", "empty", "reinterpret_tensor", "assert_size_stride",
    "assert_alignment", "get_raw_stream", "alloc_from_pool", "_alloc_from_pool", "as_strided",
    "check_bounds", "del", "len", "int", "float", "bool", "print", "tuple", "list", "range",
    "record_function", "sym_sum", "clear", "update", "partial", "Runner", "call", "synchronize",
}


@dataclass
class Audit:
    kernels: list = field(default_factory=list)     # Triton kernel names, in launch order
    fallbacks: list = field(default_factory=list)   # other computing calls, as written

    def __add__(self, other):
        return Audit(self.kernels + other.kernels, self.fallbacks + other.fallbacks)


def _name(func):
    parts = []
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if isinstance(func, ast.Name):
        parts.append(func.id)
    return ".".join(reversed(parts))


def audit_source(source):
    """The Audit of one module of Inductor's generated code (its `call` functions)."""
    audit = Audit()
    for function in ast.walk(ast.parse(source)):
        if not (isinstance(function, ast.FunctionDef) and function.name == "call"):
            continue
        for node in ast.walk(function):
            if not isinstance(node, ast.Call):
                continue
            name = _name(node.func)
            if name.endswith(".run") and name.count(".") == 1:
                audit.kernels.append(name[:-len(".run")])
            elif name and name.split(".")[-1] not in _BOOKKEEPING and not name.startswith(("torch.Size", "self.")):
                audit.fallbacks.append(name)
    return audit


def compiled_modules():
    """How many modules Inductor has loaded in this process: audit_compiled(since=...) skips them."""
    from torch._inductor.codecache import PyCodeCache
    return len(PyCodeCache.modules)


def audit_compiled(since=0):
    """The Audit of every graph compiled (or loaded from Inductor's cache) in this process so far."""
    from torch._inductor.codecache import PyCodeCache
    total = Audit()
    for module in PyCodeCache.modules[since:]:
        path = getattr(module, "__file__", None)
        if path and (hasattr(module, "call") or hasattr(module, "runner")):
            with open(path) as f:
                total = total + audit_source(f.read())
    return total
