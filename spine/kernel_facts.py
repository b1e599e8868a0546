"""KernelFacts: what the compile learns about a kernel that later stages and the launcher read, one typed
record that travels in the compiled kernel's metadata (`metadata["spine"]`, JSON like the rest of it)."""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace

METADATA_KEY = "spine"
UNTRACED_ADDRESS = -1   # in KernelFacts.address_args: an address the compile could not trace to an argument


@dataclass(frozen=True)
class KernelFacts:
    # The conversion's (to_linalg/function.py): each runtime argument's kind ("ptr" or a scalar type), the
    # arguments the kernel may store through, the extra memref views of arguments after the grid
    # arguments, the arguments read in place, whether loads and stores check bounds (debug), and a lower
    # bound on the bytes each program stores (streaming stores); whether it dereferences pointers made from
    # integers (host addresses: only code in this process can); the matrix units its products run on.
    arg_kinds: tuple = ()
    written_args: tuple = ()
    argument_views: tuple = ()
    direct_load_args: tuple = ()
    bounds_checked: bool = False
    stored_bytes_per_program: int = 0
    integer_addresses: bool = False
    # The runtime arguments the dereferenced integers come from: a scalar argument's value or a pointer
    # argument's contents (a table of addresses) may hold them (to_linalg/address_origins.py);
    # UNTRACED_ADDRESS when some come from elsewhere.
    address_args: tuple = ()
    # the matrix-unit micro-kernels its products run on (spine/microkernels.py's names)
    matrix_units: tuple = ()
    # The llir stage's: how LLVM built the kernel (a fallback may have replaced the requested CPU), and
    # the passes that gave up, with why.
    codegen: str = ""
    codegen_cpu: str = ""
    gave_up: tuple = ()

    def to_metadata(self) -> dict:
        return {name: list(value) if isinstance(value, tuple) else value for name, value in asdict(self).items()}

    @classmethod
    def from_metadata(cls, metadata) -> "KernelFacts":
        """From a compile's metadata: the dict stages fill in, or the named tuple triton loads from its cache."""
        raw = metadata.get(METADATA_KEY) if isinstance(metadata, dict) else getattr(metadata, METADATA_KEY, None)
        if raw is None:
            return cls()
        return cls(**{f.name: _frozen(raw[f.name]) for f in fields(cls) if f.name in raw})

    def updated(self, **changes) -> "KernelFacts":
        return replace(self, **{name: _frozen(value) for name, value in changes.items()})


def _frozen(value):
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    return value
