"""The runtime's side of the profiler: running a grid with its records collected into one block (layout
in cpp/profile_buffers.h; records.Launch reads it), and the counter's calibration. In-process kernels go
through the host runtime library; the QEMU executor gets the same block in the kernel server's reply
(driver/qemu.py)."""
from __future__ import annotations

import ctypes
import platform
import struct

from .records import Counter, Launch

RECORD_FUNCTION = b"spine_proton_record"
CALIBRATION_MS = 20


def launch_of(kernel: str, grid, target: str, counter: Counter, block: bytes, wall_ns: int,
              started_ns: int) -> Launch:
    return Launch(kernel, tuple(grid), target, counter, wall_ns, started_ns, block)


def calls_records(so_path: str) -> bool:
    """Whether a kernel binary was compiled with proton scopes (it imports the record function): such a
    kernel always runs profiled, so its records never pile up in the runtime's buffers."""
    with open(so_path, "rb") as f:
        return RECORD_FUNCTION in f.read()


def parse_counter(payload: bytes, target: str, emulated: bool) -> Counter:
    """The kernel server's COUNTER reply: f64 Hz, u64 ticks, i64 CLOCK_MONOTONIC ns, then the name."""
    hz, ticks, monotonic = struct.unpack_from("<dQq", payload)
    return Counter(payload[24:].decode(), hz, ticks, monotonic, target, emulated)


class NativeBuffers:
    """Profiled launches through the in-process runtime library (cpp/host_runtime.c links the buffers)."""

    def __init__(self, runtime: ctypes.CDLL):
        self.runtime = runtime
        runtime.spine_profile_run_grid.argtypes = ([ctypes.c_void_p, ctypes.c_void_p] + [ctypes.c_int32] * 5
                                                   + [ctypes.POINTER(ctypes.c_void_p),
                                                      ctypes.POINTER(ctypes.c_uint64)])
        runtime.spine_profile_run_grid.restype = ctypes.c_int
        runtime.spine_profile_free.argtypes = [ctypes.c_void_p]
        runtime.spine_profile_calibrate.argtypes = [ctypes.c_int32, ctypes.POINTER(ctypes.c_uint64),
                                                    ctypes.POINTER(ctypes.c_int64)]
        runtime.spine_profile_calibrate.restype = ctypes.c_double
        runtime.spine_profile_counter_name.restype = ctypes.c_char_p
        self._counter: Counter | None = None

    def counter(self) -> Counter:
        if self._counter is None:
            ticks, monotonic = ctypes.c_uint64(), ctypes.c_int64()
            hz = self.runtime.spine_profile_calibrate(CALIBRATION_MS, ctypes.byref(ticks), ctypes.byref(monotonic))
            self._counter = Counter(self.runtime.spine_profile_counter_name().decode(), hz, ticks.value,
                                    monotonic.value, platform.machine())
        return self._counter

    def run_grid(self, entry: int, args, grid, threads: int, record_programs: bool) -> tuple[int, bytes | None]:
        """Runs the grid profiled; returns its status and the block's bytes (records.Launch reads them)."""
        block, size = ctypes.c_void_p(), ctypes.c_uint64()
        rc = self.runtime.spine_profile_run_grid(entry, args, grid[0], grid[1], grid[2], threads,
                                                 int(record_programs), ctypes.byref(block), ctypes.byref(size))
        if not block.value:
            return rc, None
        try:
            return rc, ctypes.string_at(block.value, size.value)
        finally:
            self.runtime.spine_profile_free(block)
