"""The timing interface triton.testing.do_bench (and so autotuning) expects from a device.

Kernel launches on the CPU are synchronous, so an event is just a clock reading. triton-cpu adds a second
clock, which its `do_bench(..., measure_time_with_hooks=True)` turns on: only the time inside kernel
launches, as triton's launch hooks see it, so that the Python around the launches (argument preparation,
the benchmark's own loop) is left out. `CPUDeviceInterface.hook_timing()` is that clock here."""
from __future__ import annotations

import contextlib
import dataclasses
import time


class CPUEvent:

    def __init__(self, enable_timing: bool = True):
        self.t = None

    def record(self, stream=None):
        self.t = time.perf_counter()

    def synchronize(self):
        pass

    def elapsed_time(self, end: "CPUEvent") -> float:
        """Milliseconds between this event and `end`."""
        return (end.t - self.t) * 1000.0


@dataclasses.dataclass
class LaunchClock:
    """Seconds spent in each kernel launch since it started, read by triton's launch enter and exit hooks."""
    times: list = dataclasses.field(default_factory=list)
    started: float | None = None

    def enter(self, metadata) -> None:
        self.started = time.perf_counter()

    def exit(self, metadata) -> None:
        self.times.append(time.perf_counter() - self.started)


class LaunchEvent:
    """An event on a LaunchClock: what lies between two of them is the launches recorded in between."""

    def __init__(self, clock: LaunchClock):
        self.clock = clock
        self.index = None

    def record(self, stream=None):
        self.index = len(self.clock.times)

    def synchronize(self):
        pass

    def elapsed_time(self, end: "LaunchEvent") -> float:
        """Milliseconds inside the kernel launches between this event and `end`."""
        return sum(self.clock.times[self.index:end.index]) * 1000.0


class CPUDeviceInterface:
    """One per driver: it knows whether launches are being timed by hooks (`hook_timing`)."""

    def __init__(self):
        self.clock: LaunchClock | None = None

    def Event(self, enable_timing: bool = True):   # noqa: N802 (torch's and triton's name)
        return CPUEvent(enable_timing) if self.clock is None else LaunchEvent(self.clock)

    @contextlib.contextmanager
    def hook_timing(self):
        """Within it, events measure only the time inside kernel launches (triton-cpu's hook timing)."""
        from triton import knobs
        outer, self.clock = self.clock, LaunchClock()
        enter, exit_ = self.clock.enter, self.clock.exit
        knobs.runtime.launch_enter_hook.add(enter)
        knobs.runtime.launch_exit_hook.add(exit_)
        try:
            yield self.clock
        finally:
            knobs.runtime.launch_enter_hook.remove(enter)
            knobs.runtime.launch_exit_hook.remove(exit_)
            self.clock = outer

    @staticmethod
    def synchronize(device=None):
        pass

    @staticmethod
    def current_device():
        return 0

    @staticmethod
    def device_count():
        return 1

    @staticmethod
    def is_available():
        return True
