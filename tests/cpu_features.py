"""Which x86 instruction-set levels this machine can run (from /proc/cpuinfo)."""
import functools
import platform

# The cpuinfo flags each level needs beyond the one before (the x86-64 psABI's micro-architecture levels).
_LEVEL_FLAGS = {
    "x86-64": set(),
    "x86-64-v2": {"sse4_2", "popcnt", "ssse3", "cx16"},
    "x86-64-v3": {"avx2", "fma", "bmi2", "movbe", "f16c"},
    "x86-64-v4": {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"},
}
_ORDER = ("x86-64", "x86-64-v2", "x86-64-v3", "x86-64-v4")


@functools.lru_cache(maxsize=None)
def _flags() -> frozenset:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def host_runs(level: str) -> bool:
    """Whether code for an x86-64 level (or a CPU name's level) runs on this machine."""
    if platform.machine() != "x86_64":
        return False
    from spine.targets import generic_cpu
    level = generic_cpu("x86_64-unknown-linux-gnu", level, "")
    needed = set().union(*(_LEVEL_FLAGS[lv] for lv in _ORDER[:_ORDER.index(level) + 1]))
    return needed <= _flags()


def host_has(*flags: str) -> bool:
    """Whether this machine's CPU reports every one of the /proc/cpuinfo `flags` (amx_tile, avx512_vnni, ...)."""
    return platform.machine() == "x86_64" and set(flags) <= _flags()


@functools.lru_cache(maxsize=None)
def host_runs_amx() -> bool:
    """Whether this machine's CPU has AMX and Linux lets this process use its tile state
    (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA), Linux 5.16 on)."""
    if not host_has("amx_tile", "amx_int8", "amx_bf16"):
        return False
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.syscall(158, 0x1023, 18) == 0
