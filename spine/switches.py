"""Every environment variable Spine reads, declared once and typed (the pattern of `triton.knobs`).

A switch marked `compile_key` changes what a compile produces: its value is part of the compile cache key
and of the device index triton keys its in-memory kernel cache by, so flipping it never needs a cache wipe.
Read a switch with `SWITCH.get()`; it re-reads the environment on every call (tests and users change
variables mid-process), so hot paths read once per launch, not per element."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable


def _flag(raw: str) -> bool:
    return raw.strip().lower() not in ("", "0", "false", "off", "no")


@dataclass(frozen=True)
class Switch:
    name: str
    parse: Callable[[str], object]
    default: object
    doc: str
    compile_key: bool = False

    def raw(self) -> str | None:
        value = os.environ.get(self.name)
        return value if value not in (None, "") else None

    def export(self, value: str) -> None:
        """Sets the variable for this process and the processes it starts (e.g. Inductor's compile workers)."""
        os.environ[self.name] = value

    def get(self):
        raw = self.raw()
        if raw is None:
            return self.default
        try:
            return self.parse(raw)
        except ValueError:
            raise ValueError(f"{self.name}={raw!r}: expected {self.parse.__name__}") from None


def _positive_int(raw: str) -> int:
    value = int(raw)
    if value <= 0:
        raise ValueError(raw)
    return value


def _non_negative_int(raw: str) -> int:
    value = int(raw)
    if value < 0:
        raise ValueError(raw)
    return value


# A timeout crosses into C and into poll(2) as integer nanoseconds or milliseconds: a value past about
# three centuries would overflow them, so it is read as "never", as `inf` is.
_LONGEST_TIMEOUT_S = 1e10


def _seconds(raw: str) -> float:
    """A timeout in seconds: 0 or `inf` (or anything past _LONGEST_TIMEOUT_S) means none and reads as 0.0;
    negative, NaN and non-numbers are errors, never read as some other timeout."""
    if "_" in raw:   # float() reads "1_0" as 10; seconds are written as plain decimals
        raise ValueError(raw)
    value = float(raw)
    if value != value or value < 0:
        raise ValueError(raw)
    return 0.0 if value >= _LONGEST_TIMEOUT_S else value


_positive_int.__name__ = "a positive integer"
_non_negative_int.__name__ = "a non-negative integer"
_seconds.__name__ = "seconds (a number >= 0; 0 or inf: never)"
_flag.__name__ = "a flag (0 or 1)"

TARGET = Switch("SPINE_TARGET", str, "riscv64", "`riscv64` (default) or `host`; `CPUDriver(target=...)` overrides it",
                compile_key=True)
HOST_CPU = Switch("SPINE_HOST_CPU", str, None, "LLVM CPU name for `host` code (default: this machine's, e.g. "
                  "`znver4`); set it to compile for another x86 CPU", compile_key=True)
HOST_FEATURES = Switch("SPINE_HOST_FEATURES", str, None, "LLVM feature string for `host` code (default: this "
                       "machine's; with `SPINE_HOST_CPU` set, that CPU's)", compile_key=True)
RISCV_CPU = Switch("SPINE_RISCV_CPU", str, "generic-rv64", "CPU for riscv64 code: an LLVM CPU name (e.g. "
                   "`sifive-x280`), or a SpacemiT core's name or arch id (`spacemit-x60`, `spacemit-a100`, `0xA064`: "
                   "spine/spacemit_cores.py; `spacemit-a100` code runs on A100 cores only)", compile_key=True)
RISCV_FEATURES = Switch("SPINE_RISCV_FEATURES", str, "+64bit,+m,+a,+f,+d,+c,+v,+zfh,+zvfh,+zba,+zbb,+zbs",
                        "LLVM features for riscv64 (default RV64GC + V + Zfh/Zvfh + Zba/Zbb/Zbs)", compile_key=True)
MATRIX_UNIT = Switch("SPINE_MATRIX_UNIT", _flag, True, "int8 `tl.dot` and `smt.dot` on the target's matrix unit "
                     "where it has one (K1's IME on `spacemit-x60`; int8 and fp16 on `spacemit-a100`, K3's; int8 and bf16 on x86's AMX, or its VNNI and BF16 dot "
                     "products; spine/microkernels.py); "
                     "0: vector code",
                     compile_key=True)
DUMP_PATH = Switch("SPINE_TRITON_DUMP_PATH", str, "", "write every stage (`.ttir .linalg .llir .s .o .so`) "
                   "here, named by kernel", compile_key=True)
DUMP_PASSES = Switch("SPINE_DUMP_PASSES", str, "", "write the module after every pass of the `llir` stage here "
                     "(`<kernel>.<NN>-<pass>.mlir` and `.ll`), with `<kernel>.passes.txt`, what each pass did",
                     compile_key=True)
KERNEL_CAPTURE = Switch("PROTON_KERNEL_CAPTURE", _flag, False, "record every kernel launch (kernel, grid, time, "
                        "and the scopes of instrumented kernels) and write them when the process exits, to "
                        "`PROTON_OUTPUT` or as a table on stdout")
PROTON_OUTPUT = Switch("PROTON_OUTPUT", str, None, "where the CPU profiler writes (capture at exit, "
                       "`profiler.dump()`): `.json` a Chrome trace for Perfetto, `.hatchet` a tree for hatchet "
                       "and `python -m spine.proton.viewer`; unset: a table on stdout")
PROTON_VERBOSE = Switch("PROTON_VERBOSE", _flag, False, "the CPU profiler also records every program "
                        "instance and adds per-thread detail to its table")
DISABLE_PROTON = Switch("TRITON_DISABLE_PROTON", _flag, False, "turns the CPU profiler off: kernels compile "
                        "without their scopes, nothing is recorded or written", compile_key=True)
STREAMING_STORES_MB = Switch("SPINE_STREAMING_STORES_MB", _non_negative_int, 16, "x86 hosts: a launch whose programs store "
                             "at least this many MiB between them writes its output with non-temporal stores, "
                             "around the caches (0: never)", compile_key=True)
NUM_THREADS = Switch("SPINE_NUM_THREADS", _positive_int, None, "threads for the grid (default: all cores)")
GRID_SPIN_US = Switch("SPINE_GRID_SPIN_US", _non_negative_int, None, "how long idle grid threads poll for the next launch "
                      "before sleeping (default 200)")
GRID_OPENMP = Switch("SPINE_GRID_OPENMP", _flag, True, "host: a launch runs on the OpenMP threads the process "
                     "already has (PyTorch's), not the grid's own, so that the two never outnumber the cores")
QEMU = Switch("SPINE_QEMU", str, None, "QEMU binary (default: `qemu-riscv64` on the PATH)")
QEMU_CPU = Switch("SPINE_QEMU_CPU", str, "rv64,v=true,vlen=256,elen=64,vext_spec=v1.0,zfh=true,zvfh=true,zba=true,zbb=true,"
                  "zbs=true,zbc=true,zbkc=true,zicond=true,zicbom=true,zicboz=true,zicbop=true",
                  "QEMU `-cpu` string (default VLEN 256, and the extensions code for `spacemit-x60` may use)")
QEMU_TRACE = Switch("SPINE_QEMU_TRACE", str, None, "log every guest instruction to this file (instruction "
                    "counting, `python -m spine.count`)")
KERNEL_TIMEOUT = Switch("SPINE_KERNEL_TIMEOUT", _seconds, 600.0, "seconds before a launch is declared hung and "
                        "stopped, raising KernelFault: under QEMU and on a board, and on the host when set "
                        "(there it has no default; 0 or `inf`: never)")
REMOTE = Switch("SPINE_REMOTE", str, None, "a command that opens a POSIX shell on a riscv64 board (e.g. "
                "`ssh user@board sh`): `riscv64` kernels then run there (see Running on a board); a compile key "
                "only so that kernels loaded before it changed are loaded anew, for the board", compile_key=True)
REMOTE_RUNNER = Switch("SPINE_REMOTE_RUNNER", str, None, "a command prefix the board's shell runs the kernel "
                       "server with, for a remote that cannot run riscv64 code itself (the tests: a local "
                       "shell and `qemu-riscv64 ...`)")
SERVER_KERNEL_SLOTS = Switch("SPINE_SERVER_KERNEL_SLOTS", _positive_int, 4096, "how many kernels one kernel server "
                             "(QEMU or a board) keeps loaded, at most 4096; past it the server is replaced and "
                             "kernels load again (passed to the kernel server on its command line; smaller for tests)")
ARENA_MB = Switch("SPINE_ARENA_MB", _positive_int, 64, "initial size of the QEMU shared arena (grows on demand)")
COMPILE_TIMEOUT = Switch("SPINE_COMPILE_TIMEOUT", _seconds, 600.0, "seconds one compile stage may take in the "
                         "compile worker before it is stopped (0 or `inf`: never)")
CACHE_DIR = Switch("SPINE_CACHE_DIR", str, None, "Spine's own cache (runtime builds, loaded kernels); default "
                   "`spine/` under triton's cache directory. Cache directories must be the user's own and "
                   "not writable by others: Spine refuses any other")

ALL = (TARGET, HOST_CPU, HOST_FEATURES, RISCV_CPU, RISCV_FEATURES, MATRIX_UNIT, DUMP_PATH, DUMP_PASSES, KERNEL_CAPTURE,
       PROTON_OUTPUT, PROTON_VERBOSE, DISABLE_PROTON, STREAMING_STORES_MB, NUM_THREADS, GRID_SPIN_US, GRID_OPENMP, QEMU,
       QEMU_CPU, QEMU_TRACE, KERNEL_TIMEOUT, ARENA_MB, SERVER_KERNEL_SLOTS, COMPILE_TIMEOUT, CACHE_DIR, REMOTE, REMOTE_RUNNER)


def instrumentation_on() -> bool:
    """triton's own switch for kernel scopes, `triton.profiler.flags.flags.instrumentation_on`: process
    state rather than an environment variable, but it changes what a compile produces just the same.
    Read without importing triton.profiler: a process that never imported it cannot have set it."""
    import sys
    flags = sys.modules.get("triton.profiler.flags")
    return bool(flags is not None and flags.flags.instrumentation_on)


def proton_scopes() -> bool:
    """Whether kernels compile their proton scopes into profile records (compiler/backend.py)."""
    return instrumentation_on() and not DISABLE_PROTON.get()


def compile_key_values() -> tuple:
    """The raw values of every compile-affecting switch, and triton's instrumentation flag: cheap enough
    to read on every launch."""
    return tuple(s.raw() for s in ALL if s.compile_key) + (instrumentation_on(),)
