"""The machines Spine compiles for: a triple, a CPU, its features, and how a kernel reaches it."""
from __future__ import annotations

import functools
import os
import platform
from dataclasses import dataclass

# RVV 1.0 with half-precision scalars and vectors and the bit-manipulation extensions a K1-class
# (SpacemiT X60) core has. We do not name cpu=spacemit-x60: QEMU 7.2 lacks some of its extensions.
RISCV64_FEATURES = "+64bit,+m,+a,+f,+d,+c,+v,+zfh,+zvfh,+zba,+zbb,+zbs"


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
    features = os.environ.get("SPINE_RISCV_FEATURES", RISCV64_FEATURES)
    return Target("riscv64", "riscv64", "riscv64-unknown-linux-gnu", "generic-rv64", features)


@functools.lru_cache(maxsize=None)
def host_target() -> Target:
    import llvmlite.binding as llvm
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    triple = llvm.get_process_triple()
    cpu = llvm.get_host_cpu_name()
    features = llvm.get_host_cpu_features().flatten()
    return Target("host", platform.machine(), triple, cpu, features)


def target_from_name(name: str | None = None) -> Target:
    name = (name or os.environ.get("SPINE_TARGET") or "riscv64").lower()
    if name in ("riscv64", "rv64", "riscv"):
        return riscv64_target()
    if name in ("host", "native"):
        return host_target()
    raise ValueError(f"unknown Spine target {name!r}: expected 'riscv64' or 'host'")
