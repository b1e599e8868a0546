"""The machines Spine compiles for: a triple, a CPU, its features, and how a kernel reaches it."""
from __future__ import annotations

import functools
import platform
from dataclasses import dataclass, replace

from . import switches
from .spacemit_cores import core_named

# Largest buffer (bytes) the generated code keeps on the stack instead of the heap. Shared by the
# conversion (which tiles may be copied into a stack buffer) and the lowering (which allocations become
# allocas); worker threads get stacks far larger than this.
STACK_TILE_BYTES = 64 * 1024
# Addresses this far apart fall into the same L1 set (x86: 64 sets of 64 bytes): rows of a matrix a
# multiple of it apart evict each other when a register block reads or writes several at once.
L1_WAY_BYTES = 4096

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
    "sandybridge": "x86-64-v2", "ivybridge": "x86-64-v2", "westmere": "x86-64-v2", "nehalem": "x86-64-v2",
    "x86-64-v4": "x86-64-v4", "x86-64-v3": "x86-64-v3", "x86-64-v2": "x86-64-v2", "x86-64": "x86-64",
}
# What Spine's choices need to know of an x86 CPU's own features beyond its level: AMX, AVX512-VNNI,
# AVX512-BF16 and AVX-VNNI (spine/microkernels.py).
_VNNI, _BF16, _AVX_VNNI = ("+avx512vnni",), ("+avx512vnni", "+avx512bf16"), ("+avxvnni",)
_AMX = _BF16 + ("+amx-tile", "+amx-int8", "+amx-bf16")
X86_CPU_FEATURES = {"cascadelake": _VNNI, "icelake-client": _VNNI, "icelake-server": _VNNI, "tigerlake": _VNNI,
                    "rocketlake": _VNNI, "cooperlake": _BF16, "znver4": _BF16, "znver5": _BF16,
                    "alderlake": _AVX_VNNI, "raptorlake": _AVX_VNNI, "meteorlake": _AVX_VNNI, "arrowlake": _AVX_VNNI,
                    "sapphirerapids": _AMX, "emeraldrapids": _AMX, "graniterapids": _AMX, "graniterapids-d": _AMX,
                    "diamondrapids": _AMX}
# RISC-V CPUs whose own features include V.
RISCV_VECTOR_CPUS = ("spacemit-x60", "sifive-x280", "sifive-x390", "sifive-p470", "sifive-p670", "sifive-p870")
# What else Spine's choices need to know of a RISC-V CPU's own features: K1's matrix unit (XSMTVDot) and its
# fixed VLEN, which the matrix instructions' tile shapes depend on.
RISCV_CPU_FEATURES = {"spacemit-x60": ("+xsmtvdot", "+zvl256b")}


def cpu_features(triple: str, cpu: str, features: str) -> frozenset:
    """The features ("+name") of code built for `cpu` with the LLVM feature string `features`, as far as
    Spine's choices need to know them: the CPU's own (its x86 level's, V for the RISC-V cores above), with
    the string's additions and removals applied on top, as LLVM applies them ("-sse4a" leaves znver4's
    AVX-512 in place)."""
    own = set()
    if triple.startswith("riscv64"):
        if cpu in RISCV_VECTOR_CPUS or "rva23" in cpu:
            own.add("+v")
        own.update(RISCV_CPU_FEATURES.get(cpu, ()))
    elif triple.startswith(("x86_64", "i686")):
        level = _X86_CPU_LEVELS.get(cpu)
        names = [name for name, _ in _X86_LEVELS]
        for name, required in _X86_LEVELS[names.index(level) if level in names else len(names):]:
            own.update(required)
        own.update(X86_CPU_FEATURES.get(cpu, ()))
    for feature in filter(None, features.split(",")):
        if feature.startswith("-"):
            own.discard("+" + feature[1:])
        else:
            own.add(feature if feature.startswith("+") else "+" + feature)
    return frozenset(own)


def min_vector_bits(target: "Target") -> int:
    """The VLEN code for `target` assumes at the least (its Zvl<N>b features; 0 when it assumes none):
    K3's A100 code is built for VLEN 1024 and runs on no narrower vector unit."""
    if not target.triple.startswith("riscv64"):
        return 0
    widths = [int(f[4:-1]) for f in cpu_features(target.triple, target.cpu, target.features)
              if f.startswith("+zvl") and f.endswith("b") and f[4:-1].isdigit()]
    return max(widths, default=0)


# CPU names of AMD cores, and names that stand for no particular core.
_AMD_CPU_PREFIXES = ("znver", "bdver", "btver", "amdfam", "k8", "athlon", "opteron", "barcelona")
_GENERIC_CPU_PREFIXES = ("x86-64", "generic", "i686")


def is_amd(cpu: str) -> bool:
    """Whether an x86 CPU name is one of AMD's cores."""
    return cpu.startswith(_AMD_CPU_PREFIXES)


def prefetches_next_program(triple: str, cpu: str) -> bool:
    """Whether a row-wise kernel built for `cpu` prefetches the row the next program will load
    (to_linalg/prefetch.py). Intel cores, measured on a Xeon: layer norm 0-6 % and softmax 2-15 % faster,
    since their prefetchers stop at each 4 KiB page. Not AMD's: on a Zen 4 (EPYC) the prefetch made layer
    norm 40-45 % and softmax 5-10 % slower, same-process A/B, one and two threads. Not a CPU name that
    stands for no particular core either: it may run on either. x86 only; RISC-V's prefetches need
    Zicbop, which kernels are not built for."""
    if not triple.startswith("x86_64"):
        return False
    return bool(cpu) and not cpu.startswith(_AMD_CPU_PREFIXES + _GENERIC_CPU_PREFIXES)


def byte_dot_lanes(triple: str, cpu: str, features: str) -> int:
    """32-bit lanes of the CPU's `vpdpbusd` (sums of 4 byte products a lane): 16 with AVX512-VNNI (Cascade
    Lake, Ice Lake, Zen 4 on), 8 with AVX-VNNI alone (Alder Lake on), 0 without either and off x86."""
    if not triple.startswith("x86_64"):
        return 0
    known = cpu_features(triple, cpu, features)
    return 16 if "+avx512vnni" in known else 8 if "+avxvnni" in known else 0


def has_fused_multiply_add(triple: str, cpu: str, features: str) -> bool:
    """Whether code built for `cpu` may use fused multiply-add instructions: every RISC-V core with F; on x86
    all but the CPUs known to lack them (a level or feature string without FMA: x86-64-v2, Sandy Bridge). An
    x86 name not in _X86_CPU_LEVELS, with no feature string, is taken to have them."""
    if not triple.startswith(("x86_64", "i686")):
        return True
    known = cpu in _X86_CPU_LEVELS or any(f.lstrip("+-") == "fma" for f in features.split(","))
    return "+fma" in cpu_features(triple, cpu, features) or not known


@dataclass(frozen=True)
class Target:
    name: str          # "riscv64" or "host"
    arch: str          # machine name as `uname -m` prints it
    triple: str
    cpu: str
    features: str
    core: str = ""     # the SpacemiT core (spacemit_cores.py) the riscv64 code is for, if one was chosen

    @property
    def is_native(self) -> bool:
        """Whether code for this target runs in this process, not under QEMU."""
        return self.arch == platform.machine()


def riscv64_target(cpu: str | None = None) -> Target:
    """riscv64 code for `cpu` (default SPINE_RISCV_CPU): an LLVM CPU name, a SpacemiT core's name or its
    arch id."""
    # Not cpu=spacemit-x60 by default: QEMU 7.2 lacks some of its extensions.
    cpu = cpu or switches.RISCV_CPU.get()
    core = core_named(cpu)
    features = switches.RISCV_FEATURES.get()
    if core and core.features:
        features = ",".join(filter(None, (features, core.features)))
    return Target("riscv64", "riscv64", "riscv64-unknown-linux-gnu", core.llvm_cpu if core else cpu,
                  features, core.name if core else "")


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
            # LLVM tunes most AVX-512 cores for 256-bit loops (the clock drop of Skylake-SP's 512-bit
            # units), half the width torch's own kernels use on the same core. Full width measured 20-25 %
            # faster on softmax in cache, 10-15 % from memory (bench/RESULTS.md).
            if "+avx512f" in features.split(","):
                features += ",-prefer-256-bit"
    return Target("host", platform.machine(), triple, cpu, features or "")


def target_from_name(name: str | None = None) -> Target:
    """"riscv64" or "host" (default SPINE_TARGET); "riscv64:<core>" is riscv64 code for a SpacemiT core
    (what `target_name` writes for one)."""
    name = (name or switches.TARGET.get()).lower()
    name, _, core = name.partition(":")
    if name in ("riscv64", "rv64", "riscv"):
        return riscv64_target(core or None)
    if name in ("host", "native") and not core:
        return host_target()
    raise ValueError(f"unknown Spine target {name!r}: expected 'riscv64' or 'host'")


def target_name(target: Target) -> str:
    """The name target_from_name turns back into `target`'s kind and core: triton's `GPUTarget.arch`."""
    return f"{target.name}:{target.core}" if target.core else target.name


def generic_cpu(triple: str, cpu: str, features: str) -> str:
    """The CPU-neutral name for the same instruction set: LLVM then tunes for no particular core. The safer
    configuration a crashed codegen retries with (LLVM's cost models differ per core, and so do its bugs)."""
    if triple.startswith("riscv64"):
        return "generic-rv64"
    if triple.startswith(("x86_64", "i686")):
        enabled = cpu_features(triple, cpu, features)
        for level, required in _X86_LEVELS:
            if enabled.issuperset(required):
                return level
        return "x86-64"
    return "generic"


def with_cpu(target: Target, cpu: str) -> Target:
    return replace(target, cpu=cpu)
