"""Deterministic cost of riscv64 kernels: every guest instruction one launch executes inside the kernel,
counted under QEMU (`python -m spine.count --help`).

    trace.py      QEMU's execution log of one launch, read as it is written
    rvv.py        which of the kernel's instructions are vector instructions
    cycles.py     an estimate of the cycles on SpacemiT's X60 (LLVM's scheduling model), and the
                  multiply-accumulates
    arguments.py  arguments for a launch from the command line
    __main__.py   the command line

Instructions outside the kernel's .so (libm, the grid runtime, the requests for kept panels that packed
matrix products make: cpp/shared_panels.h, about 22 a request) are not counted; bench/matmul_count.py
counts them beside the kernel's for a matrix product. The counts are the same
run to run; VLEN changes them for vector code (`-cpu ...,vlen=128`), which is the point of choosing a
core: the same vector-length-agnostic binary does less work per instruction on a wider machine."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from .. import switches
from ..driver.qemu import vlen_of
from .cycles import CycleEstimate, estimate
from .rvv import KernelImage
from .trace import Trace, traced_launch


@dataclass(frozen=True)
class LaunchCount:
    per_program: tuple    # guest instructions of each program instance, in program id order (x fastest)
    vector: int           # how many of all of them were vector instructions
    x60: Optional[CycleEstimate] = None    # cycles estimated for SpacemiT's X60, multiply-accumulates

    @property
    def total(self) -> int:
        return sum(self.per_program)

    @property
    def vector_share(self) -> float:
        return self.vector / self.total if self.total else 0.0


def count_launch(launch, qemu_cpu: str | None = None) -> LaunchCount:
    """Counts one call of `launch` (a riscv64 launch that returns the CompiledKernel, or a LoadedKernel),
    under QEMU's `-cpu qemu_cpu` (default: SPINE_QEMU_CPU)."""
    from ..driver.cpu_driver import vector_bits_of_binary
    trace = traced_launch(launch, qemu_cpu)
    loaded = getattr(trace.result, "function", trace.result)
    with open(loaded.so_path, "rb") as f:
        binary = f.read()
    # the guest's VLEN: QEMU's, raised to what the kernel was built for (K3 A100's 1024), as the executor does
    vlen = max(vlen_of(qemu_cpu or switches.QEMU_CPU.get()), vector_bits_of_binary(binary))
    return launch_count(trace, KernelImage.of(binary), vlen)


def launch_count(trace: Trace, image: KernelImage, vlen: int = 256) -> LaunchCount:
    lo, hi = trace.text
    entry = image.entry_address(lo)
    programs = []
    for start, length in zip(trace.run_starts, trace.run_lengths):
        if not lo <= start < hi:
            continue
        if start == entry or not programs:
            programs.append(0)
        programs[-1] += length
    vector = sum(n for pc, n in trace.counts.items() if lo <= pc < hi and image.is_vector_at(pc, lo))
    x60 = estimate(trace.counts, lambda pc: image.word_at(pc, lo), lo, hi, vlen)
    return LaunchCount(tuple(programs), vector, x60)


def executed_addresses(launch) -> tuple[dict, tuple, object]:
    """One traced call of `launch`: how often each guest address ran, the kernel's code range [lo, hi), and
    what `launch` returned."""
    trace = traced_launch(launch)
    return trace.counts, trace.text, trace.result


def count_instructions(launch) -> int:
    """Guest instructions executed inside the kernel by one call of `launch`."""
    counts, (lo, hi), _ = executed_addresses(launch)
    return sum(n for pc, n in counts.items() if lo <= pc < hi)


__all__ = ["CycleEstimate", "LaunchCount", "count_instructions", "count_launch", "executed_addresses",
           "launch_count", "vlen_of"]
