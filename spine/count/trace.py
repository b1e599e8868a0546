"""Every guest instruction of one riscv64 launch under QEMU, read from QEMU's execution log.

QEMU's clock-like counters (rdcycle, rdinstret) report host time in user mode, so they cannot measure a
kernel. Instead the kernel server runs with one instruction per translation block and execution logging
(SPINE_QEMU_TRACE, into a FIFO read here as QEMU writes it): every log line is one executed guest
instruction and its address. The grid runs on one thread, so the log is complete and in program order.

Two views are kept: how often each address ran, and the log as straight-line runs (a new run starts at
every taken branch, call or return), in order: enough to find where each program instance begins."""
from __future__ import annotations

import contextlib
import os
import re
import tempfile
import threading
from array import array
from dataclasses import dataclass

from .. import switches

_PC = re.compile(rb"^Trace \d+: 0x[0-9a-f]+ \[[0-9a-f]+/([0-9a-f]+)/")


@dataclass
class Trace:
    counts: dict          # guest address → times executed
    run_starts: array     # address each straight-line run started at, in execution order
    run_lengths: array    # instructions in each run
    text: tuple           # the kernel's executable range [lo, hi) in the guest
    result: object        # what the launch returned


class _TraceReader(threading.Thread):
    def __init__(self, path: str):
        super().__init__(daemon=True)
        self.path = path
        self.counts: dict[int, int] = {}
        self.run_starts = array("Q")
        self.run_lengths = array("Q")

    def run(self):
        counts, starts, lengths = self.counts, self.run_starts, self.run_lengths
        previous, length = -8, 0
        with open(self.path, "rb") as f:
            for line in f:
                m = _PC.match(line)
                if not m:
                    continue
                pc = int(m.group(1), 16)
                counts[pc] = counts.get(pc, 0) + 1
                if 0 < pc - previous <= 4:
                    length += 1
                else:
                    if length:
                        lengths.append(length)
                    starts.append(pc)
                    length = 1
                previous = pc
        if length:
            lengths.append(length)


@contextlib.contextmanager
def _switches_set(values: dict):
    """Sets switches (spine/switches.py; None: unset) for the duration, then restores the environment."""
    saved = {switch.name: os.environ.get(switch.name) for switch in values}
    for switch, value in values.items():
        if value is None:
            os.environ.pop(switch.name, None)
        else:
            os.environ[switch.name] = str(value)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def traced_launch(launch, qemu_cpu: str | None = None) -> Trace:
    """Runs `launch` (a riscv64 launch returning the CompiledKernel, or a LoadedKernel) once in a freshly
    started, traced kernel server with the grid on one thread (and QEMU's `-cpu qemu_cpu`, if given). A
    server that had to restart midway (its arena grew) would end the log there: that is an error, never a
    short count."""
    from ..driver.cpu_driver import _executor_for
    from ..targets import riscv64_target

    with tempfile.TemporaryDirectory(prefix="spine-count-") as tmp:
        fifo = os.path.join(tmp, "trace")
        os.mkfifo(fifo)
        reader = _TraceReader(fifo)
        reader.start()
        # Under QEMU, whatever SPINE_TARGET says: counting needs QEMU's log, not a board.
        values = {switches.QEMU_TRACE: fifo, switches.NUM_THREADS: 1, switches.REMOTE: None}
        if qemu_cpu:
            values[switches.QEMU_CPU] = qemu_cpu
        with _switches_set(values):
            executor = _executor_for(riscv64_target())
            executor.shutdown()          # the next launch starts a traced server
            started = executor.generation
            result = launch()
            restarts = executor.generation - started - 1
            executor.shutdown()          # QEMU flushes the log as it exits
        if restarts > 0:
            raise RuntimeError(f"the kernel server restarted {restarts} time(s) while counting (its arena grew, "
                               f"or its kernel table filled): the count would miss what ran after; set "
                               f"{switches.ARENA_MB.name} larger")
        reader.join(timeout=600)
    return Trace(reader.counts, reader.run_starts, reader.run_lengths, _text_range(result), result)


def _text_range(result) -> tuple:
    """Where the guest server loaded the kernel's code, as its executor recorded it. A launch whose arguments
    overlapped ran the kernel's alias-safe variant: then that variant is the one loaded, and counted."""
    kernel = getattr(result, "function", result)
    launcher = getattr(result, "_run", None)
    launcher = getattr(launcher, "python_launcher", launcher)  # behind the fast path
    variant = getattr(launcher, "alias_safe_kernel", None)
    if variant is not None and getattr(variant.function, "loaded", None) is not None \
            and variant.function.generation >= getattr(kernel, "generation", -1):
        kernel = variant.function  # loaded by the latest server, the traced one
    on_server = getattr(kernel, "loaded", None)
    if on_server is not None:
        return tuple(on_server.text)
    return tuple(kernel.state["text"])
