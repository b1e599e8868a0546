"""What runs a compiled kernel: one small interface, two implementations.

`NativeExecutor` calls the kernel in this process (host target, or riscv64 on a riscv64 machine);
`QemuExecutor` (qemu.py) hands it to a guest server under QEMU user mode. The launcher knows nothing about
how the binary was made or where it runs."""
from __future__ import annotations

import ctypes
import os
import platform
import time
from dataclasses import dataclass, field

from .. import switches
from ..errors import DeviceAssertionError, KernelFault
from ..proton import buffers as proton_buffers
from ..proton import session as proton
from .source_lines import with_source_line


_CORES = os.cpu_count() or 1
GRID_FAULTED = -1  # grid.h's SPINE_GRID_FAULTED


def default_num_threads() -> int:
    return switches.NUM_THREADS.get() or _CORES


@dataclass
class LoadedKernel:
    """A kernel binary made ready by an executor; `state` is the executor's own handle."""
    name: str
    so_path: str
    executor: object
    state: dict = field(default_factory=dict)


class NativeExecutor:
    """Runs kernels in-process through the C grid runtime; pointers are passed as they are."""

    def __init__(self):
        from .toolchain import host_runtime_library
        self.runtime = ctypes.CDLL(host_runtime_library(), mode=os.RTLD_GLOBAL)
        self.runtime.spine_host_run_grid.argtypes = [ctypes.c_void_p, ctypes.c_void_p] + [ctypes.c_int32] * 4
        self.runtime.spine_host_run_grid.restype = ctypes.c_int
        self.runtime.spine_take_assert_failure.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        self.runtime.spine_take_assert_failure.restype = ctypes.c_int
        self.runtime.spine_grid_take_fault.argtypes = [ctypes.c_char_p, ctypes.c_int]
        self.runtime.spine_grid_take_fault.restype = ctypes.c_int
        spin = switches.GRID_SPIN_US.get()
        if spin is not None:
            self.runtime.spine_grid_set_spin(spin)
        self.profile = proton_buffers.NativeBuffers(self.runtime)
        self.target_label = "riscv64" if platform.machine() == "riscv64" else "host"

    def load(self, name: str, so_path: str) -> LoadedKernel:
        lib = ctypes.CDLL(so_path, mode=os.RTLD_LOCAL)
        entry = ctypes.cast(lib.spine_entry, ctypes.c_void_p).value
        # A kernel with proton scopes always runs profiled, so its records never pile up in the buffers.
        instrumented = proton_buffers.calls_records(so_path)
        return LoadedKernel(name, so_path, self, {"lib": lib, "entry": entry, "instrumented": instrumented})

    def run(self, kernel: LoadedKernel, grid, params, values, written) -> None:
        n = len(values)
        slots = (ctypes.c_uint64 * max(n, 1))(
            *[value.data_ptr() if param.is_pointer else value for param, value in zip(params, values)])
        base = ctypes.addressof(slots)
        args = (ctypes.c_void_p * max(n, 1))(*range(base, base + 8 * n, 8))
        rc, profiled = self._run_grid(kernel, args, grid)
        if rc == GRID_FAULTED:
            message = ctypes.create_string_buffer(1024)
            self.runtime.spine_grid_take_fault(message, len(message))
            self.runtime.spine_take_assert_failure(message, 0)  # a partial launch's assertions are moot
            report = with_source_line(message.value.decode(errors="replace"))
            raise KernelFault(f"kernel '{kernel.name}' faulted: {report}")
        if rc:
            raise RuntimeError(f"launching kernel '{kernel.name}' failed: {os.strerror(rc)}")
        message = ctypes.create_string_buffer(1024)
        if self.runtime.spine_take_assert_failure(message, len(message)):
            raise DeviceAssertionError(f"kernel '{kernel.name}': device assertion failed: {message.value.decode()}")
        if profiled is not None:
            self._record(kernel, grid, *profiled)

    def _run_grid(self, kernel: LoadedKernel, args, grid):
        """Runs the grid: profiled when the kernel has proton scopes or a profiling session listens
        (spine/proton/), returning (plan, block, wall ns, start) for _record."""
        plan = proton.plan_launch(kernel.state["instrumented"])
        if plan is None:
            return self.runtime.spine_host_run_grid(kernel.state["entry"], args, grid[0], grid[1], grid[2],
                                                    default_num_threads()), None
        started, clock = time.monotonic_ns(), time.perf_counter_ns()
        rc, block = self.profile.run_grid(kernel.state["entry"], args, grid, default_num_threads(), plan.programs)
        return rc, (plan, block, time.perf_counter_ns() - clock, started)

    def _record(self, kernel: LoadedKernel, grid, plan, block, wall: int, started: int) -> None:
        if plan.deliver and block is not None:
            launch = proton_buffers.launch_of(kernel.name, grid, self.target_label, self.profile.counter(), block,
                                              wall, started)
            proton.record_launch(launch, plan)
