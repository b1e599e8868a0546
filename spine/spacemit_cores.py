"""SpacemiT's cores, by the names and the arch ids spine-triton knows them by, and the code Spine builds
for each.

spine-triton's driver reports the core it runs on as `driver.current_arch_id`, a string such as "0x503C",
and code tuned per core (FlagGems' SpacemiT vendor) keys its tables by it. Spine's riscv64 target is
chosen by SPINE_RISCV_CPU, which may name one of these cores or give its arch id; the driver then reports
that core's id, and `GPUTarget("cpu", arch_id, ...)` compiles for it.

LLVM 22 knows only the X60 (`spacemit-x60`, which A60 shares). For the others Spine builds RV64GCV code
that assumes no vector length (correct at any VLEN: K3's X100 cores have 256), tuned for no particular
core, except K3's A100: its code assumes VLEN 1024 (Zvl1024b) and has the matrix instructions (XSMTVDot for
`smt.vmadot`, the rest by encoding: spine/microkernels.py's "a100"), so it runs on A100 cores only (the
runtime places the grid's threads there, cpp/grid.c) and, under QEMU, on a VLEN 1024 CPU.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Core:
    name: str        # spine-triton's CPU name for the core
    arch_id: int
    llvm_cpu: str    # the CPU name Spine gives LLVM for it
    features: str = ""   # LLVM features its code has beyond the riscv64 target's (SPINE_RISCV_FEATURES)
    marchid: int = 0     # what Linux's /proc/cpuinfo says of such a core (its marchid CSR); 0: not known
    own_cores_only: bool = False   # its code runs on no other core: kernels name the core (spine_core_marchid)

    @property
    def arch_id_text(self) -> str:
        """The id as spine-triton's driver prints it: "0x" and upper-case hex digits."""
        return f"0x{self.arch_id:X}"


CORES = (
    # marchid values: the table SpacemiT's llama.cpp port picks its kernels by (ggml-cpu/spacemit/ime_env.cpp)
    Core("spacemit-x60", 0x503C, "spacemit-x60", marchid=0x8000000058000001),     # K1's cores
    Core("spacemit-x100", 0x5064, "generic-rv64", marchid=0x8000000058000002),    # K3's general-purpose cores
    Core("spacemit-x200", 0x50C8, "generic-rv64"),
    Core("spacemit-a60", 0xA03C, "spacemit-x60", marchid=0x8000000041000001),
    Core("spacemit-a100", 0xA064, "generic-rv64", "+zvl1024b,+xsmtvdot", marchid=0x8000000041000002,
         own_cores_only=True),   # K3's AI cores
    Core("spacemit-a200", 0xA0C8, "generic-rv64"),
    Core("spacemit-a200m", 0xF000, "generic-rv64"),
)
_BY_NAME = {c.name: c for c in CORES}
_BY_ID = {c.arch_id: c for c in CORES}


def _known() -> str:
    return ", ".join(f"{c.arch_id_text} ({c.name})" for c in CORES)


def core_named(name: str) -> Core | None:
    """The core `name` stands for (a core name or an arch id such as "0xA064"), None for any other CPU."""
    core = _BY_NAME.get(name.lower())
    if core is None and name.lower().startswith("0x"):
        core = core_of_arch_id(name)
    return core


def placed_marchid(name: str, matrix_units: tuple = ()) -> int:
    """The marchid of the cores a kernel compiled for the core `name` (a Target's `core`) must run on, 0
    when it may run anywhere: the cores whose code no other core runs (K3's A100), and, for a kernel whose
    products run on K1's matrix unit (`matrix_units` names "ime"), the cores that have one. Of K1's two
    clusters only cluster 0 has it (its datasheet: "Cluster0: quad-core with 2.0 TOPS AI-power"), and Linux
    calls all eight cores X60; SpacemiT's llama.cpp port (ime_env.cpp) takes the first four for A60s, whose
    marchid is the one named here (cpp/core_placement.c applies the same rule)."""
    core = _BY_NAME.get(name)
    if core is not None and core.own_cores_only:
        return core.marchid
    if "ime" in matrix_units and name in ("spacemit-x60", "spacemit-a60"):
        return _BY_NAME["spacemit-a60"].marchid
    return 0


def core_of_arch_id(arch_id: int | str) -> Core:
    """The core with `arch_id` (an int, or text such as "0x503C" in any case); a clear error for others."""
    value = arch_id
    if isinstance(arch_id, str):
        try:
            value = int(arch_id, 16)
        except ValueError:
            value = None
    core = _BY_ID.get(value) if isinstance(value, int) and not isinstance(value, bool) else None
    if core is None:
        raise ValueError(f"unknown SpacemiT arch id {arch_id!r}: known ids are {_known()}")
    return core
