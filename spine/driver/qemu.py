"""Runs riscv64 kernels on a non-riscv machine: a persistent guest server under QEMU user mode.

Tensors are copied into a shared-memory arena that both sides map (an anonymous memfd: no file is ever
named, so none can be left behind), pointer arguments travel as arena offsets, and after the grid ran only the
storages the kernel may write are copied back. Arguments that share a storage are copied as one span, so
aliasing views behave as they do natively. A kernel that faults kills the guest: we raise KernelFault and
start a fresh server on the next launch. The server exits by itself when this process ends, however it
ends (a lifeline pipe closes), so no guest process outlives its host."""
from __future__ import annotations

import atexit
import ctypes
import mmap
import os
import resource
import select
import signal
import shutil
import struct
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass

from .. import switches
from ..errors import DeviceAssertionError, KernelFault
from ..proton import buffers as proton_buffers
from ..proton import session as proton
from .arguments import byte_range
from .executor import LoadedKernel, default_num_threads
from .source_lines import with_source_line

CMD_LOAD, CMD_RUN, CMD_PING, CMD_RUN_PROFILED, CMD_COUNTER = 1, 2, 3, 4, 5
STATUS_ASSERTION = 2
GUEST_SYSROOT = "/usr/riscv64-linux-gnu"
ALIGN = 64
FAULT_REPORT = "spine-fault: "  # how cpp/fault_guard.c's report of a guest fault starts
_SIGNAL_MEANINGS = {signal.SIGSEGV: "invalid memory access", signal.SIGBUS: "misaligned or unmapped memory access",
                    signal.SIGILL: "illegal instruction (code for a CPU or extension QEMU does not emulate?)",
                    signal.SIGFPE: "arithmetic exception"}


def _no_core_files() -> None:
    # A faulting kernel must not leave QEMU core files (qemu_*.core) in the user's working directory.
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def qemu_binary() -> str:
    explicit = switches.QEMU.get()
    if explicit:
        return explicit
    for name in ("qemu-riscv64", "qemu-riscv64-static"):
        path = shutil.which(name)
        if path:
            return path
    raise RuntimeError("qemu-riscv64 not found: install Debian's qemu-user (scripts/setup.sh does), "
                       "or set SPINE_TARGET=host to run natively")


def trace_arguments() -> list[str]:
    """With SPINE_QEMU_TRACE=<file>, QEMU logs every executed guest instruction (one instruction per
    translation block, no chaining) to that file: bench/icount.py counts those inside a kernel."""
    path = switches.QEMU_TRACE.get()
    if not path:
        return []
    help_text = subprocess.run([qemu_binary(), "-h"], capture_output=True, text=True).stdout
    one_insn = "-one-insn-per-tb" if "-one-insn-per-tb" in help_text else "-singlestep"
    return [one_insn, "-d", "exec,nochain", "-D", path]


def kernel_timeout() -> float | None:
    value = switches.KERNEL_TIMEOUT.get()
    return value if value > 0 else None


class QemuServer:
    """One guest process and its arena."""

    def __init__(self, arena_bytes: int):
        from .toolchain import guest_kernel_server
        self.arena_bytes = arena_bytes
        if not os.path.isdir(GUEST_SYSROOT):
            raise RuntimeError(f"{GUEST_SYSROOT} is missing: install Debian's libc6-riscv64-cross")
        fd = os.memfd_create("spine-arena")
        self.stderr = tempfile.TemporaryFile()
        self.proc = self.request_fd = self.reply_fd = self.lifeline_fd = None
        try:
            os.ftruncate(fd, arena_bytes)
            self.arena = mmap.mmap(fd, arena_bytes)
            self.arena_addr = ctypes.addressof(ctypes.c_char.from_buffer(self.arena))
            request_read, self.request_fd = os.pipe()
            self.reply_fd, reply_write = os.pipe()
            # Only this process holds the write end (pipes are close-on-exec), so it closes when we die.
            lifeline_read, self.lifeline_fd = os.pipe()
            cmd = [qemu_binary(), "-L", GUEST_SYSROOT, "-cpu", switches.QEMU_CPU.get(), *trace_arguments(),
                   guest_kernel_server(), str(fd), str(arena_bytes), str(request_read), str(reply_write),
                   str(lifeline_read)]
            child_fds = (fd, request_read, reply_write, lifeline_read)
            try:
                self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stderr=self.stderr,
                                             pass_fds=child_fds, preexec_fn=_no_core_files)
            finally:
                for child_fd in child_fds[1:]:
                    os.close(child_fd)
            status, payload = self._read_reply(timeout=60)
            if status != 0:
                raise RuntimeError(f"QEMU kernel server failed to start: {payload!r}")
            self.guest_cores = struct.unpack("<I", payload)[0]
        except BaseException:
            self.close()
            raise
        finally:
            os.close(fd)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def close(self) -> None:
        proc = getattr(self, "proc", None)
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        self.proc = None
        for name in ("request_fd", "reply_fd", "lifeline_fd"):
            fd = getattr(self, name, None)
            if fd is not None:
                os.close(fd)
                setattr(self, name, None)

    def request(self, command: int, payload: bytes, timeout: float | None = None) -> bytes:
        message = struct.pack("<II", command, len(payload)) + payload
        try:
            while message:
                message = message[os.write(self.request_fd, message):]
        except OSError:
            pass  # the reply read below reports the dead server
        status, body = self._read_reply(timeout)
        if status == STATUS_ASSERTION:
            raise DeviceAssertionError(f"device assertion failed: {body.decode(errors='replace')}")
        if status != 0:
            raise RuntimeError(body.decode(errors="replace"))
        return body

    def _read_exact(self, n: int, timeout: float | None) -> bytes:
        out = bytearray()
        fd = self.reply_fd
        while len(out) < n:
            ready, _, _ = select.select([fd], [], [], timeout)
            if not ready:
                self.close()
                raise KernelFault(f"the QEMU kernel server did not answer within {timeout:.0f} s "
                                  f"(SPINE_KERNEL_TIMEOUT); it was stopped")
            chunk = os.read(fd, n - len(out))
            if not chunk:
                self.proc.wait()
                raise KernelFault(self._death_message())
            out += chunk
        return bytes(out)

    def _read_reply(self, timeout: float | None):
        status, length = struct.unpack("<iI", self._read_exact(8, timeout))
        return status, self._read_exact(length, timeout) if length else b""

    def _death_message(self) -> str:
        self.stderr.seek(0)
        err = self.stderr.read().decode(errors="replace").strip().splitlines()
        code = self.proc.returncode
        how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit status {code}"
        reports = [line[len(FAULT_REPORT):] for line in err if line.startswith(FAULT_REPORT)]
        if reports:
            return f"the kernel crashed inside QEMU: {with_source_line(reports[-1])}"
        meaning = _SIGNAL_MEANINGS.get(-code, "")
        detail = f"{how}{': ' + meaning if meaning else ''}" + (f"; QEMU said: {err[-1]}" if err else "")
        return f"the kernel crashed inside QEMU ({detail})"


@dataclass
class _Span:
    lo: int
    hi: int
    written: bool
    arena_offset: int = 0


class QemuExecutor:
    """Executes riscv64 kernels through a QemuServer, restarting it after a fault."""

    TARGET_LABEL = "riscv64 (QEMU user mode)"

    def __init__(self):
        self.server: QemuServer | None = None
        self.generation = 0
        self.lock = threading.Lock()
        self._counter = (None, None)   # (server generation, its calibrated counter)
        atexit.register(self.shutdown)

    def shutdown(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None

    def _ensure_server(self, arena_bytes: int) -> QemuServer:
        if self.server is not None and (not self.server.alive() or self.server.arena_bytes < arena_bytes):
            self.shutdown()
        if self.server is None:
            size = max(arena_bytes, switches.ARENA_MB.get() << 20)
            self.server = QemuServer(1 << (size - 1).bit_length())
            self.generation += 1
        return self.server

    def load(self, name: str, so_path: str) -> LoadedKernel:
        # A kernel with proton scopes always runs profiled, so its records never pile up in the buffers.
        return LoadedKernel(name, so_path, self, {"instrumented": proton_buffers.calls_records(so_path)})

    def counter(self, server: QemuServer):
        """The guest's counter (rdtime), calibrated once per server. Under QEMU user mode it reads the
        host's clock: the Counter says so (emulated=True)."""
        generation, counter = self._counter
        if generation != self.generation:
            body = server.request(CMD_COUNTER, b"", timeout=60)
            counter = proton_buffers.parse_counter(body, "riscv64", emulated=True)
            self._counter = (self.generation, counter)
        return counter

    def _handle(self, kernel: LoadedKernel, server: QemuServer) -> int:
        if kernel.state.get("generation") != self.generation:
            body = server.request(CMD_LOAD, kernel.so_path.encode())
            handle, text_lo, text_hi = struct.unpack("<IQQ", body)
            kernel.state.update(generation=self.generation, handle=handle, text=(text_lo, text_hi))
        return kernel.state["handle"]

    @staticmethod
    def _spans(params, values, written) -> tuple[dict, int]:
        """Group tensor arguments by storage; each group is copied as one contiguous byte span."""
        spans: dict[int, _Span] = {}
        for param, value in zip(params, values):
            if not param.is_pointer:
                continue
            lo, hi = byte_range(value)
            key = value.untyped_storage().data_ptr()
            span = spans.get(key)
            if span is None:
                spans[key] = _Span(lo, hi, param.index in written)
            else:
                span.lo, span.hi = min(span.lo, lo), max(span.hi, hi)
                span.written |= param.index in written
        total = 0
        for span in spans.values():
            span.arena_offset = total
            total += (span.hi - span.lo + ALIGN - 1) // ALIGN * ALIGN
        return spans, total

    def run(self, kernel: LoadedKernel, grid, params, values, written) -> None:
        with self.lock:
            spans, total = self._spans(params, values, written)
            server = self._ensure_server(total)
            handle = self._handle(kernel, server)
            kinds, slots = bytearray(), []
            for param, value in zip(params, values):
                if param.is_pointer:
                    span = spans[value.untyped_storage().data_ptr()]
                    kinds.append(1)
                    slots.append(span.arena_offset + value.data_ptr() - span.lo)
                else:
                    kinds.append(0)
                    slots.append(value)
            for span in spans.values():
                ctypes.memmove(server.arena_addr + span.arena_offset, span.lo, span.hi - span.lo)
            kinds += bytes(-(24 + len(kinds)) % 8)
            payload = struct.pack("<I4iI", handle, grid[0], grid[1], grid[2], default_num_threads(),
                                  len(slots)) + bytes(kinds) + struct.pack(f"<{len(slots)}Q", *slots)
            try:
                launch = self._request_run(kernel, server, payload, grid)
            except KernelFault as fault:
                self.shutdown()
                raise KernelFault(f"kernel '{kernel.name}': {fault}") from None
            except DeviceAssertionError as failure:
                self._copy_back(server, spans)  # what the kernel wrote is visible, as on a GPU
                raise DeviceAssertionError(f"kernel '{kernel.name}': {failure}") from None
            self._copy_back(server, spans)
        if launch is not None:
            proton.record_launch(*launch)

    def _request_run(self, kernel: LoadedKernel, server: QemuServer, payload: bytes, grid):
        """Runs the grid in the guest: profiled when the kernel has proton scopes or a profiling session
        listens (spine/proton/), returning (its Launch, plan) when someone takes it."""
        plan = proton.plan_launch(kernel.state["instrumented"])
        if plan is None:
            server.request(CMD_RUN, payload, timeout=kernel_timeout())
            return None
        started, clock = time.monotonic_ns(), time.perf_counter_ns()
        body = server.request(CMD_RUN_PROFILED, struct.pack("<I", plan.programs) + payload,
                              timeout=kernel_timeout())
        wall = time.perf_counter_ns() - clock
        if not plan.deliver:
            return None
        launch = proton_buffers.launch_of(kernel.name, grid, self.TARGET_LABEL, self.counter(server), body, wall,
                                          started)
        return launch, plan

    @staticmethod
    def _copy_back(server: QemuServer, spans) -> None:
        for span in spans.values():
            if span.written:
                ctypes.memmove(span.lo, server.arena_addr + span.arena_offset, span.hi - span.lo)
