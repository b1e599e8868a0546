"""The machines Spine compiles for: a triple, a CPU, its features, and how a kernel reaches it."""
from __future__ import annotations

import functools
import platform
from dataclasses import dataclass, replace

from . import switches

# Largest buffer (bytes) the generated code keeps on the stack instead of the heap. Shared by the
# conversion (which tiles may be copied into a stack buffer) and the lowering (which allocations become
# allocas); worker threads get stacks far larger than this.
STACK_TILE_BYTES = 64 * 1024

# x86-64 micro-architecture levels, newest first, each with the features that define it beyond the last.
_X86_LEVELS = (
    ("x86-64-v4", ("+avx512f", "+avx512bw", "+avx512cd", "+avx512dq", "+avx512vl")),
    ("x86-64-v3", ("+avx2", "+fma", "+bmi2", "+movbe")),
    ("x86-64-v2", ("+sse4.2", "+popcnt", "+ssse3")),
)
# The level each x86 CPU name users commonly have implies, for when only a name is given.
_X86_CPU_LEVELS = {
    "znver2": "x86-64-v3", "znver3": "x86-64-v3", "znver4": "x86-64-v4", "znver5": "x86-64-v4",
    "skylake-avx512": "x86-64-v4", "cascadelake": "x86-64-v4", "cooperlake": "x86-64-v4",
    "icelake-server": "x86-64-v4", "icelake-client": "x86-64-v4", "tigerlake": "x86-64-v4",
    "sapphirerapids": "x86-64-v4", "emeraldrapids": "x86-64-v4", "graniterapids": "x86-64-v4",
    "alderlake": "x86-64-v3", "raptorlake": "x86-64-v3", "meteorlake": "x86-64-v3", "arrowlake": "x86-64-v3",
    "haswell": "x86-64-v3", "broadwell": "x86-64-v3", "skylake": "x86-64-v3",
    "x86-64-v4": "x86-64-v4", "x86-64-v3": "x86-64-v3", "x86-64-v2": "x86-64-v2", "x86-64": "x86-64",
}


@dataclass(frozen=True)
class Target:
    name: str          # "riscv64" or "host"
    arch: str          # machine name as `uname -m` prints it
    triple: str
    cpu: str
    features: str

    @property
    def is_native(self) -> bool:
        """Whether code for this target runs in this process, not under QEMU."""
        return self.arch == platform.machine()


def riscv64_target() -> Target:
    # Not cpu=spacemit-x60 by default: QEMU 7.2 lacks some of its extensions.
    return Target("riscv64", "riscv64", "riscv64-unknown-linux-gnu", switches.RISCV_CPU.get(),
                  switches.RISCV_FEATURES.get())


def host_target() -> Target:
    return _host_target(switches.HOST_CPU.get(), switches.HOST_FEATURES.get())


@functools.lru_cache(maxsize=None)
def _host_target(cpu: str | None, features: str | None) -> Target:
    import llvmlite.binding as llvm
    llvm.initialize_native_target()
    triple = llvm.get_process_triple()
    if cpu is None:
        cpu = llvm.get_host_cpu_name()
        if features is None:
            features = llvm.get_host_cpu_features().flatten()
    return Target("host", platform.machine(), triple, cpu, features or "")


def target_from_name(name: str | None = None) -> Target:
    name = (name or switches.TARGET.get()).lower()
    if name in ("riscv64", "rv64", "riscv"):
        return riscv64_target()
    if name in ("host", "native"):
        return host_target()
    raise ValueError(f"unknown Spine target {name!r}: expected 'riscv64' or 'host'")


def generic_cpu(triple: str, cpu: str, features: str) -> str:
    """The CPU-neutral name for the same instruction set: LLVM then tunes for no particular core. The safer
    configuration a crashed codegen retries with (LLVM's cost models differ per core, and so do its bugs)."""
    if triple.startswith("riscv64"):
        return "generic-rv64"
    if triple.startswith(("x86_64", "i686")):
        enabled = set(features.split(","))
        for level, required in _X86_LEVELS:
            if enabled.issuperset(required):
                return level
        return _X86_CPU_LEVELS.get(cpu, "x86-64") if not features else "x86-64"
    return "generic"


def with_cpu(target: Target, cpu: str) -> Target:
    return replace(target, cpu=cpu)
