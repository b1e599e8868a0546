"""Kernels built for K3's A100 cores run their grid there, and K1 kernels whose products run on its matrix
unit on its cluster 0 (cpp/core_placement.c): /proc/cpuinfo's marchid lines as Linux prints them on a K3,
its X100 and A100 cores, and on a K1 (all eight X60); the grid's threads then run on the placed CPUs only
(checked with sched_getcpu in every program, natively and under QEMU), a machine with none of those cores
is a clear error, and a machine that names no core's marchid (QEMU user mode) runs the kernel where it is.
Which kernels name a marchid: those for the A100, and those for the X60 that use its matrix unit."""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from spine.driver.qemu import GUEST_SYSROOT
from spine.driver.toolchain import CPP_DIR, GUEST_ZIG_TARGET
from spine.spacemit_cores import core_named, placed_marchid
from spine.zig import zig

HERE = os.path.dirname(os.path.abspath(__file__))
A100, X100, X60, A60 = (hex(core_named(name).marchid)
                        for name in ("spacemit-a100", "spacemit-x100", "spacemit-x60", "spacemit-a60"))


def _cpuinfo(marchids: list) -> str:
    """/proc/cpuinfo as Linux's RISC-V port prints it, one block per processor."""
    return "".join(f"processor\t: {i}\nhart\t\t: {i}\nisa\t\t: rv64imafdcv\nmmu\t\t: sv39\nmvendorid\t: 0x710\n"
                   f"marchid\t\t: {m}\nmimpid\t\t: 0x1000000049772200\n\n" for i, m in enumerate(marchids))


@pytest.fixture(scope="module", params=["host", "riscv64"])
def check(request, tmp_path_factory):
    """(the check program's argv prefix) for the host and for the riscv64 guest under QEMU."""
    path = str(tmp_path_factory.mktemp("placement") / "check")
    sources = [os.path.join(HERE, "core_placement_check.c")] + [
        os.path.join(CPP_DIR, name) for name in ("core_placement.c", "grid.c", "fault_guard.c", "openmp_team.c")]
    if request.param == "host":
        zig("cc", "-O2", f"-I{CPP_DIR}", *sources, "-lpthread", "-ldl", "-o", path)
        return [path]
    if shutil.which("qemu-riscv64") is None or not os.path.isdir(GUEST_SYSROOT):
        pytest.skip("needs qemu-riscv64 and the riscv64 sysroot")
    zig("cc", "-target", GUEST_ZIG_TARGET, "-O2", f"-I{CPP_DIR}", *sources, "-lpthread", "-ldl", "-o", path)
    return ["qemu-riscv64", "-L", GUEST_SYSROOT, path]


def run(check, marchid: str, cpuinfo: str, threads: int = 0) -> list:
    proc = subprocess.run(check + [marchid, str(threads)], input=cpuinfo, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="placing on one CPU of several needs two")
def test_the_grid_runs_on_the_a100_cores_only(check):
    """The last CPU this process may run on plays the A100 (its marchid), the others X100s: every program
    runs there."""
    last = max(os.sched_getaffinity(0))
    lines = run(check, A100, _cpuinfo([X100] * last + [A100]))
    assert lines[0] == f"placed {last}" and lines[1:] == [str(last)]


def test_k3_places_on_its_eight_a100_cores(check):
    """K3: cores 0-7 X100, 8-15 A100."""
    lines = run(check, A100, _cpuinfo([X100] * 8 + [A100] * 8), threads=1)
    assert lines[0] == "placed 8,9,10,11,12,13,14,15"


def test_k1_matrix_unit_kernels_go_to_cluster_0(check):
    """A K1 names all eight cores X60; its matrix unit is cluster 0's, the first four (SpacemiT's rule)."""
    lines = run(check, A60, _cpuinfo([X60] * 8), threads=1)
    assert lines[0] == "placed 0,1,2,3"


def test_no_a100_core_is_a_clear_error(check):
    lines = run(check, A100, _cpuinfo([X60] * 8))
    assert len(lines) == 1 and lines[0].startswith("error: ") and "spacemit-a100" in lines[0] \
        and "none of this machine's 8 cores" in lines[0]
    lines = run(check, A60, _cpuinfo([X100] * 8 + [A100] * 8))   # a K1 matrix-unit kernel on a K3
    assert len(lines) == 1 and "K1's cluster 0" in lines[0] and "SPINE_MATRIX_UNIT=0" in lines[0]


def test_no_marchid_lines_run_anywhere(check):
    """QEMU user mode's /proc/cpuinfo names no core: the guest CPU is the one the kernel was built for."""
    lines = run(check, A100, "processor\t: 0\nhart\t\t: 0\nisa\t\t: rv64imafdcv\n\n")
    assert lines[0] == "placed" and len(lines) >= 2   # not placed: no CPUs listed


def test_a_kernel_naming_no_core_is_not_placed(check):
    lines = run(check, "0", _cpuinfo([X60] * 8))
    assert lines[0] == "placed"


def test_which_kernels_name_their_cores():
    assert placed_marchid("spacemit-a100") == placed_marchid("spacemit-a100", ("a100",)) == 0x8000000041000002
    assert placed_marchid("spacemit-x60", ("ime",)) == placed_marchid("spacemit-a60", ("ime",)) == 0x8000000041000001
    assert not any(placed_marchid(name) for name in ("spacemit-x60", "spacemit-x100", "spacemit-a60", "", "rv64"))
    assert not placed_marchid("generic-rv64", ("ime",)) and not placed_marchid("", ("amx",))
