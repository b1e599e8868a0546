"""Deterministic instruction counts of riscv64 kernels under QEMU.

QEMU's clock-like counters (rdcycle, rdinstret) report host time in user mode, so they cannot measure a
kernel. Instead the kernel server runs with one instruction per translation block and execution logging
(SPINE_QEMU_TRACE); every log line is one executed guest instruction with its address, and we count the
lines that fall inside the kernel's own code (the server reports where the .so was loaded). Calls into
other libraries (libm) are not counted. The grid runs on one thread so the trace is complete and ordered.
"""
from __future__ import annotations

import os
import re
import tempfile
import threading

_PC = re.compile(rb"^Trace \d+: 0x[0-9a-f]+ \[[0-9a-f]+/([0-9a-f]+)/")


class _TraceReader(threading.Thread):
    """Reads the trace FIFO and keeps every executed guest address with its count."""

    def __init__(self, path: str):
        super().__init__(daemon=True)
        self.path = path
        self.counts: dict[int, int] = {}

    def run(self):
        counts = self.counts
        with open(self.path, "rb") as f:
            for line in f:
                m = _PC.match(line)
                if m:
                    pc = int(m.group(1), 16)
                    counts[pc] = counts.get(pc, 0) + 1


def executed_addresses(launch) -> tuple[dict, tuple, object]:
    """One traced call of `launch` (a riscv64 launch that returns the CompiledKernel, or a LoadedKernel):
    how often each guest address ran, the kernel's code range [lo, hi), and what `launch` returned."""
    from spine.driver.cpu_driver import _executor_for
    from spine.targets import riscv64_target

    executor = _executor_for(riscv64_target())
    with tempfile.TemporaryDirectory(prefix="spine-icount-") as tmp:
        fifo = os.path.join(tmp, "trace")
        os.mkfifo(fifo)
        saved = {k: os.environ.get(k) for k in ("SPINE_QEMU_TRACE", "SPINE_NUM_THREADS")}
        os.environ.update(SPINE_QEMU_TRACE=fifo, SPINE_NUM_THREADS="1")
        reader = _TraceReader(fifo)
        reader.start()
        try:
            executor.shutdown()          # the next launch starts a traced server
            compiled = launch()
            executor.shutdown()          # QEMU flushes the log as it exits
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        reader.join(timeout=600)
    loaded = getattr(compiled, "function", compiled)
    return reader.counts, tuple(loaded.state["text"]), compiled


def count_instructions(launch) -> int:
    """Guest instructions executed inside the kernel by one call of `launch` (a riscv64 launch that
    returns the CompiledKernel, or a LoadedKernel)."""
    counts, (lo, hi), _ = executed_addresses(launch)
    return sum(n for pc, n in counts.items() if lo <= pc < hi)
