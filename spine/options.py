"""Compile options: what the triton frontend reads, what users pass, and what changes our output."""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Optional, Tuple


@dataclass(frozen=True)
class CPUOptions:
    # Read by triton's frontend or passed by users; GPU-only knobs are accepted and ignored.
    num_warps: int = 1
    num_ctas: int = 1
    num_stages: int = 1
    warp_size: int = 1
    debug: bool = False
    sanitize_overflow: bool = False
    enable_fp_fusion: bool = True
    launch_cooperative_grid: bool = False
    launch_pdl: bool = False
    supported_fp8_dtypes: Tuple[str, ...] = ("fp8e5", "fp8e4nv", "fp8e4b15", "fp8e4b8", "fp8e5b16")  # to_linalg/fp8.py
    deprecated_fp8_dot_operand_dtypes: Tuple[str, ...] = ()
    # A CPU has no tf32: dot is IEEE unless a kernel asks otherwise, and "tf32" is computed as IEEE.
    default_dot_input_precision: str = "ieee"
    allowed_dot_input_precisions: Tuple[str, ...] = ("ieee", "tf32", "tf32x3", "bf16x3", "bf16x6")
    max_num_imprecise_acc_default: int = 0
    extern_libs: Optional[tuple] = None
    instrumentation_mode: str = ""
    backend_name: str = "cpu"
    arch: str = "riscv64"
    # Ours: everything that changes the generated code or the files a compile writes.
    triple: str = ""
    cpu: str = ""
    features: str = ""
    dump_path: str = ""
    # every pass's output, under this directory (compiler/passes.py)
    dump_passes: str = ""
    # proton scopes in kernels become profile records (instrumentation on, TRITON_DISABLE_PROTON unset)
    proton_scopes: bool = False
    # x86: launches whose programs store at least this many MiB stream their stores (0: never)
    streaming_stores_mb: int = 16
    # True: every load copies its tile (the variant the launcher falls back to when read-only arguments
    # overlap written memory); False: loads from never-written arguments read in place.
    alias_safe: bool = False

    def __post_init__(self):
        if self.num_warps <= 0 or (self.num_warps & (self.num_warps - 1)):
            raise ValueError(f"num_warps must be a power of two, got {self.num_warps}")

    def hash(self) -> str:
        import hashlib
        key = "_".join(f"{f.name}-{getattr(self, f.name)}" for f in fields(self))
        return hashlib.sha256(key.encode()).hexdigest()


def environment_switches() -> dict:
    """The options that environment switches set (see switches.py); they change what a compile produces."""
    from . import switches
    return {"dump_path": switches.DUMP_PATH.get(), "dump_passes": switches.DUMP_PASSES.get(),
            "proton_scopes": switches.proton_scopes(),
            "streaming_stores_mb": switches.STREAMING_STORES_MB.get()}
