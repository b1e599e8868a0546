"""The timing interface triton.testing.do_bench (and so autotuning) expects from a device.

Kernel launches on the CPU are synchronous, so an event is just a clock reading."""
from __future__ import annotations

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


class CPUDeviceInterface:
    Event = CPUEvent

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
