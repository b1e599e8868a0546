"""Compile options: what the triton frontend reads, what users pass, and what changes our output.

Triton refuses a launch keyword that is not a field here ("Keyword argument ... was specified but
unrecognised"), so the options kernels written for other backends pass are fields too: triton-cpu's
(`num_cpu_threads` and `num_threads` cap the grid's threads for the kernel's launches; `assume_in_bounds`
is accepted and changes nothing, since Spine checks masks in any case) and the GPU backends' tuning knobs
(GPU_ONLY: accepted, ignored, one warning per name and process, and left out of the compile key)."""
from __future__ import annotations

import threading
import warnings
from dataclasses import dataclass, field, fields
from typing import Optional, Tuple


def _gpu_only(default=None):
    """An option of NVIDIA's, AMD's or triton-cpu's backend that tunes code for hardware Spine does not
    target (GPU_ONLY)."""
    return field(default=default, metadata={"gpu_only": True})


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
    # the SpacemiT core the riscv64 code is for, if one was named (spacemit_cores.py: where its grid runs)
    core: str = ""
    dump_path: str = ""
    # every pass's output, under this directory (compiler/passes.py)
    dump_passes: str = ""
    # proton scopes in kernels become profile records (instrumentation on, TRITON_DISABLE_PROTON unset)
    proton_scopes: bool = False
    # x86: launches whose programs store at least this many MiB stream their stores (0: never)
    streaming_stores_mb: int = 16
    # int8 products on the target's matrix unit, where it has one (SPINE_MATRIX_UNIT; spine/microkernels.py)
    matrix_unit: bool = True
    # True: every load copies its tile (the variant the launcher falls back to when read-only arguments
    # overlap written memory); False: loads from never-written arguments read in place.
    alias_safe: bool = False
    # triton-cpu's: the most threads the grid runs on for this kernel's launches (0: SPINE_NUM_THREADS, or
    # every core); num_threads is its older name.
    num_cpu_threads: int = 0
    num_threads: int = 0
    assume_in_bounds: bool = False
    # GPU_ONLY's options, each None unless given
    maxnreg: Optional[int] = _gpu_only()
    ptx_version: Optional[int] = _gpu_only()
    ptx_options: Optional[str] = _gpu_only()
    enable_reflect_ftz: Optional[bool] = _gpu_only()
    waves_per_eu: Optional[int] = _gpu_only()
    matrix_instr_nonkdim: Optional[int] = _gpu_only()
    kpack: Optional[int] = _gpu_only()
    allow_flush_denorm: Optional[bool] = _gpu_only()
    schedule_hint: Optional[str] = _gpu_only()
    cluster_dims: tuple = _gpu_only((1, 1, 1))     # Inductor's launcher reads it from the metadata
    num_buffers_warp_spec: Optional[int] = _gpu_only()
    num_consumer_groups: Optional[int] = _gpu_only()
    reg_dec_producer: Optional[int] = _gpu_only()
    reg_inc_consumer: Optional[int] = _gpu_only()
    enable_fast_math: Optional[bool] = _gpu_only()
    vec_lib: Optional[str] = _gpu_only()
    enable_vector_xsmm: Optional[bool] = _gpu_only()
    enable_triton_xsmm: Optional[bool] = _gpu_only()
    enable_raise_block_pointer: Optional[bool] = _gpu_only()

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


GPU_ONLY = tuple(f.name for f in fields(CPUOptions) if f.metadata.get("gpu_only"))
_DEFAULTS = {f.name: f.default for f in fields(CPUOptions)}
_warned: set = set()
_warned_lock = threading.Lock()


def warn_ignored(opts: dict) -> None:
    """One warning per GPU-only option name given (other than at its default), per process."""
    for name in GPU_ONLY:
        value = opts.get(name)
        # (the metadata of a compiled kernel, which the alias-safe recompile passes back, holds lists)
        if value is None or (tuple(value) if isinstance(value, list) else value) == _DEFAULTS[name]:
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
            "streaming_stores_mb": switches.STREAMING_STORES_MB.get(), "matrix_unit": switches.MATRIX_UNIT.get()}
