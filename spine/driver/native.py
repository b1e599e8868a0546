"""Kernels that run in this process: the host target, or riscv64 on a riscv64 machine.

The grid runs on the C runtime's thread pool (cpp/grid.c, cpp/host_runtime.c) under its fault guard, so a
kernel that faults raises KernelFault instead of taking the process down. Pointer arguments are passed as
they are. Launches normally skip `NativeKernel.launch`: the host launch fast path (cpp/launch.cpp, see
launcher.py) calls `direct_entry` itself and comes back here only to report a fault or an assertion.

Kernel faults are caught by the runtime's signal handlers, which must stay in front of handlers installed
after them (faulthandler.enable, signal.signal for SIGINT): Python's functions that install one are wrapped
so that the runtime puts its own back in front at once, chaining to the new one (cpp/fault_guard.h); handlers
installed from C are found within a few hundred launches. A launch stopped by Ctrl-C raises
KeyboardInterrupt."""
from __future__ import annotations

import ctypes
import faulthandler
import functools
import os
import platform
import signal
import time
from dataclasses import dataclass, field

from .. import switches
from ..errors import DeviceAssertionError, KernelFault
from ..proton import buffers as proton_buffers
from ..proton import session as proton
from .arguments import Arguments
from .settings import default_num_threads, host_kernel_timeout_ns
from .source_lines import with_source_line

# grid.h's SPINE_GRID_* codes
GRID_FAULTED, GRID_INTERRUPTED, GRID_POISONED, GRID_TOO_LARGE = -1, -2, -3, -4



class GraphLaunch(ctypes.Structure):
    """host_runtime.c's spine_graph_launch_t: one launch of a replayed launch graph."""
    _fields_ = [("entry", ctypes.c_void_p), ("args", ctypes.c_void_p), ("gx", ctypes.c_int32),
                ("gy", ctypes.c_int32), ("gz", ctypes.c_int32), ("threads", ctypes.c_int32)]


# Python's functions that install signal handlers the runtime's must stay in front of.
_HANDLER_INSTALLERS = ((signal, "signal"), (faulthandler, "enable"), (faulthandler, "disable"),
                       (faulthandler, "register"), (faulthandler, "unregister"))


def _keep_handlers_in_front(check) -> None:
    """Wraps each of _HANDLER_INSTALLERS so that `check` (spine_fault_guard_check_handlers) runs after it."""
    for module, name in _HANDLER_INSTALLERS:
        original = getattr(module, name, None)
        if original is None or getattr(original, "__spine_checks_handlers__", False):
            continue

        @functools.wraps(original)
        def installer(*args, __original=original, **kwargs):
            try:
                return __original(*args, **kwargs)
            finally:
                check()
        installer.__spine_checks_handlers__ = True
        setattr(module, name, installer)


class NativeRuntime:
    """The host runtime library (loaded RTLD_GLOBAL: kernels bind to its device print/assert and profile
    record functions), with the argument types of what we call in it."""

    def __init__(self):
        from .toolchain import host_runtime_library
        lib = ctypes.CDLL(host_runtime_library(), mode=os.RTLD_GLOBAL)
        lib.spine_host_run_grid.argtypes = [ctypes.c_void_p, ctypes.c_void_p] + [ctypes.c_int32] * 4 + [ctypes.c_int64]
        lib.spine_host_run_grid.restype = ctypes.c_int
        lib.spine_grid_set_timeout_ns.argtypes = [ctypes.c_int64]
        lib.spine_grid_set_timeout_ns.restype = None
        lib.spine_take_assert_failure.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        lib.spine_take_assert_failure.restype = ctypes.c_int
        lib.spine_grid_take_fault.argtypes = [ctypes.c_char_p, ctypes.c_int]
        lib.spine_grid_take_fault.restype = ctypes.c_int
        lib.spine_place_for_kernel.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]
        lib.spine_place_for_kernel.restype = ctypes.c_int
        lib.spine_assert_pending.argtypes = []
        lib.spine_assert_pending.restype = ctypes.c_int
        lib.spine_host_run_graph.argtypes = [ctypes.POINTER(GraphLaunch), ctypes.c_int32, ctypes.c_int32,
                                             ctypes.c_int64, ctypes.POINTER(ctypes.c_int)]
        lib.spine_host_run_graph.restype = ctypes.c_int32
        lib.spine_fault_guard_check_handlers.argtypes = []
        lib.spine_fault_guard_check_handlers.restype = None
        _keep_handlers_in_front(lib.spine_fault_guard_check_handlers)
        if not switches.GRID_OPENMP.get():
            lib.spine_openmp_share(0)
        spin = switches.GRID_SPIN_US.get()
        if spin is not None:
            lib.spine_grid_set_spin(spin)
        self.lib = lib
        self.profile = proton_buffers.NativeBuffers(lib)
        self.target_label = "riscv64" if platform.machine() == "riscv64" else "host"

    def address(self, symbol: str) -> int:
        """Where a runtime function is, for the launch fast path to call it without ctypes."""
        return ctypes.cast(getattr(self.lib, symbol), ctypes.c_void_p).value

    def run_grid(self, entry: int, args, grid, threads: int, timeout_ns: int | None = None) -> int:
        """Runs the grid under `timeout_ns` (default: SPINE_KERNEL_TIMEOUT's, read now)."""
        timeout_ns = host_kernel_timeout_ns() if timeout_ns is None else timeout_ns
        return self.lib.spine_host_run_grid(entry, args, grid[0], grid[1], grid[2], threads, timeout_ns)

    def profiled_run_grid(self, entry: int, args, grid, threads: int, timeout_ns: int,
                          programs: bool) -> tuple[int, bytes | None]:
        """As run_grid, recording the launch (proton/buffers.py); its timeout goes to the runtime first."""
        self.lib.spine_grid_set_timeout_ns(timeout_ns)
        return self.profile.run_grid(entry, args, grid, threads, programs)

    def place(self, library: ctypes.CDLL) -> None:
        """Puts the grid's threads on the cores a just-loaded kernel's code needs, if it names some
        (cpp/core_placement.h); a clear error when this machine has none of them."""
        message = ctypes.create_string_buffer(512)
        if self.lib.spine_place_for_kernel(library._handle, message, len(message)):
            raise RuntimeError(message.value.decode(errors="replace"))

    def take_fault(self) -> str:
        message = ctypes.create_string_buffer(1024)
        self.lib.spine_grid_take_fault(message, len(message))
        self.lib.spine_take_assert_failure(message, 0)  # a partial launch's assertions are moot
        return with_source_line(message.value.decode(errors="replace"))

    def take_assert_failure(self) -> str | None:
        message = ctypes.create_string_buffer(1024)
        if self.lib.spine_take_assert_failure(message, len(message)):
            return message.value.decode(errors="replace")
        return None


@dataclass
class NativeKernel:
    """A kernel shared object loaded into this process."""
    name: str
    so_path: str
    runtime: NativeRuntime
    library: ctypes.CDLL = field(repr=False)
    entry: int
    instrumented: bool   # has proton scopes: always runs profiled, so its records never pile up

    @property
    def direct_entry(self) -> int:
        return 0 if self.instrumented else self.entry

    def __call__(self, grid, args: Arguments) -> None:
        self.launch(grid, args)

    def launch(self, grid, args: Arguments) -> None:
        n = len(args.values)
        slots = (ctypes.c_uint64 * max(n, 1))(*args.slots())
        base = ctypes.addressof(slots)
        pointers = (ctypes.c_void_p * max(n, 1))(*range(base, base + 8 * n, 8))
        threads, timeout_ns = default_num_threads(args.threads), host_kernel_timeout_ns()   # a bad value raises here
        plan = proton.plan_launch(self.instrumented)
        if plan is None:
            self.check(self.runtime.run_grid(self.entry, pointers, grid, threads, timeout_ns))
            return
        started, clock = time.monotonic_ns(), time.perf_counter_ns()
        rc, block = self.runtime.profiled_run_grid(self.entry, pointers, grid, threads, timeout_ns,
                                                   plan.programs)
        wall = time.perf_counter_ns() - clock
        self.check(rc)
        if plan.deliver and block is not None:
            launch = proton_buffers.launch_of(self.name, grid, self.runtime.target_label,
                                              self.runtime.profile.counter(), block, wall, started)
            proton.record_launch(launch, plan)

    def prepare(self, grid, args: Arguments) -> "PreparedLaunch":
        """This launch made ready to run again and again (a launch graph's replay, graph.py): its slots
        encoded once."""
        n = len(args.values)
        slots = (ctypes.c_uint64 * max(n, 1))(*args.slots())
        base = ctypes.addressof(slots)
        pointers = (ctypes.c_void_p * max(n, 1))(*range(base, base + 8 * n, 8))
        requested = default_num_threads(args.threads) if args.threads else 0
        return PreparedLaunch(self, grid, args, slots, pointers, requested)

    def check(self, rc: int) -> None:
        """Raises what a launch that returned `rc` ended in: a fault, a stop by Ctrl-C, a launch refused or
        failed, a failed assertion."""
        if rc == GRID_FAULTED:
            raise KernelFault(f"kernel '{self.name}' faulted: {self.runtime.take_fault()}")
        if rc == GRID_INTERRUPTED:
            raise KeyboardInterrupt(f"kernel '{self.name}' was {self.runtime.take_fault()}")
        if rc == GRID_POISONED:
            raise RuntimeError(f"kernel '{self.name}' was not launched: an earlier kernel was stopped inside the C "
                               "library or the runtime, which may hold locks it never releases; restart the "
                               "process")
        if rc == GRID_TOO_LARGE:
            raise ValueError(f"kernel '{self.name}': the grid has more program instances than a launch can count "
                             "(the product of its sizes must be at most 2**62)")
        if rc:
            raise RuntimeError(f"launching kernel '{self.name}' failed: {os.strerror(rc)}")
        failure = self.runtime.take_assert_failure()
        if failure is not None:
            raise DeviceAssertionError(f"kernel '{self.name}': device assertion failed: {failure}")


@dataclass
class PreparedLaunch:
    """A NativeKernel launch with its argument slots encoded (NativeKernel.prepare), kept alive with them."""
    kernel: NativeKernel
    grid: tuple
    args: Arguments
    slots: object
    pointers: object
    threads: int          # the kernel's own num_cpu_threads (0: the replay's)

    def row(self) -> GraphLaunch:
        return GraphLaunch(self.kernel.entry, ctypes.addressof(self.pointers), *self.grid, self.threads)


class PreparedGraph:
    """Prepared launches of one runtime, replayed in order by one call into it (spine_host_run_graph, where
    a launch on its own costs two calls through ctypes); their table is built once."""

    def __init__(self, launches: list):
        self.launches = launches
        self.runtime = launches[0].kernel.runtime
        self.table = (GraphLaunch * len(launches))(*(p.row() for p in launches))
        self.profiled_always = any(p.kernel.instrumented for p in launches)

    def run(self, settings, profiled: bool) -> None:
        """Runs the launches with the replay's RuntimeSettings; the first that faults or fails an assertion
        raises as its launch would, and the rest do not run. Profiled (`profiled`, or a kernel with Proton
        scopes) each takes NativeKernel.launch, which records it."""
        if profiled or self.profiled_always:
            for p in self.launches:
                p.kernel.launch(p.grid, p.args)
            return
        rc = ctypes.c_int(0)
        done = self.runtime.lib.spine_host_run_graph(self.table, len(self.launches), settings.threads,
                                                     settings.timeout_ns, ctypes.byref(rc))
        if done < len(self.launches):
            self.launches[done].kernel.check(rc.value)


class NativeExecutor:
    """Loads kernels into this process."""

    def __init__(self):
        self.runtime = NativeRuntime()

    def load(self, name: str, so_path: str) -> NativeKernel:
        library = ctypes.CDLL(so_path, mode=os.RTLD_LOCAL)
        self.runtime.place(library)
        entry = ctypes.cast(library.spine_entry, ctypes.c_void_p).value
        return NativeKernel(name, so_path, self.runtime, library, entry, proton_buffers.calls_records(so_path))

    def shutdown(self) -> None:
        pass  # kernels stay loaded for the life of the process
