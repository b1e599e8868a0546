"""Compile options: what the triton frontend reads, what users pass, and what changes our output.

Triton refuses a launch keyword that is not a field here ("Keyword argument ... was specified but
unrecognised"), so the options kernels written for other backends pass are fields too: triton-cpu's
(`num_cpu_threads` and `num_threads` cap the grid's threads for the kernel's launches; `assume_in_bounds`
is accepted and changes nothing, since Spine checks masks in any case) and the GPU backends' tuning knobs
(GPU_ONLY: accepted, ignored, one warning per name and process, and left out of the compile key)."""
from __future__ import annotations

import threading
import warnings
from dataclasses import dataclass, fields
from typing import Optional, Tuple

# Options of NVIDIA's, AMD's and triton-cpu's backends that tune code for hardware Spine does not target.
GPU_ONLY = ("maxnreg", "ptx_version", "ptx_options", "enable_reflect_ftz", "waves_per_eu", "matrix_instr_nonkdim",
            "kpack", "allow_flush_denorm", "schedule_hint", "cluster_dims", "num_buffers_warp_spec",
            "num_consumer_groups", "reg_dec_producer", "reg_inc_consumer", "enable_fast_math", "vec_lib",
            "enable_vector_xsmm", "enable_triton_xsmm", "enable_raise_block_pointer")


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
    # triton-cpu's: the most threads the grid runs on for this kernel's launches (0: SPINE_NUM_THREADS, or
    # every core); num_threads is its older name.
    num_cpu_threads: int = 0
    num_threads: int = 0
    assume_in_bounds: bool = False
    # GPU_ONLY's options, each None unless given
    maxnreg: Optional[int] = None
    ptx_version: Optional[int] = None
    ptx_options: Optional[str] = None
    enable_reflect_ftz: Optional[bool] = None
    waves_per_eu: Optional[int] = None
    matrix_instr_nonkdim: Optional[int] = None
    kpack: Optional[int] = None
    allow_flush_denorm: Optional[bool] = None
    schedule_hint: Optional[str] = None
    cluster_dims: tuple = (1, 1, 1)     # Inductor's launcher reads it from the metadata
    num_buffers_warp_spec: Optional[int] = None
    num_consumer_groups: Optional[int] = None
    reg_dec_producer: Optional[int] = None
    reg_inc_consumer: Optional[int] = None
    enable_fast_math: Optional[bool] = None
    vec_lib: Optional[str] = None
    enable_vector_xsmm: Optional[bool] = None
    enable_triton_xsmm: Optional[bool] = None
    enable_raise_block_pointer: Optional[bool] = None

    def __post_init__(self):
        if self.num_warps <= 0 or (self.num_warps & (self.num_warps - 1)):
            raise ValueError(f"num_warps must be a power of two, got {self.num_warps}")
        for name in ("num_cpu_threads", "num_threads"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be a whole number of threads, 0 for all cores; got {value!r}")

    def hash(self) -> str:
        import hashlib
        key = "_".join(f"{f.name}-{getattr(self, f.name)}" for f in fields(self) if f.name not in GPU_ONLY)
        return hashlib.sha256(key.encode()).hexdigest()


_warned: set = set()
_warned_lock = threading.Lock()


def warn_ignored(opts: dict) -> None:
    """One warning per GPU-only option name given (other than at its default), per process."""
    defaults = {f.name: f.default for f in fields(CPUOptions)}
    for name in GPU_ONLY:
        value = opts.get(name)
        # (the metadata of a compiled kernel, which the alias-safe recompile passes back, holds lists)
        if value is None or (tuple(value) if isinstance(value, list) else value) == defaults[name]:
            continue
        with _warned_lock:
            if name in _warned:
                continue
            _warned.add(name)
        warnings.warn(f"Spine: the launch option {name}={opts[name]!r} tunes code for GPUs; CPUs ignore it",
                      RuntimeWarning, stacklevel=4)


def environment_switches() -> dict:
    """The options that environment switches set (see switches.py); they change what a compile produces."""
    from . import switches
    return {"dump_path": switches.DUMP_PATH.get(), "dump_passes": switches.DUMP_PASSES.get(),
            "proton_scopes": switches.proton_scopes(),
            "streaming_stores_mb": switches.STREAMING_STORES_MB.get()}
