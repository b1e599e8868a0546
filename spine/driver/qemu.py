"""Runs riscv64 kernels on a non-riscv machine: a persistent guest server under QEMU user mode, spoken to
through the kernel server protocol (kernel_protocol.py) over two pipes.

Tensors are copied into a shared-memory arena that both sides map (an anonymous memfd: no file is ever
named, so none can be left behind), pointer arguments travel as arena offsets, and after the grid ran only the
storages the kernel may write are copied back. Arguments that share a storage are copied as one span, so
aliasing views behave as they do natively. A kernel that faults kills the guest: we raise KernelFault and
start a fresh server on the next launch. The server exits by itself when this process ends, however it
ends (a lifeline pipe closes), so no guest process outlives its host.

Most launches do not run QemuKernel.launch: the launch fast path (cpp/launch.cpp) lays out the arena the
same way (arena_layout), copies and makes the RUN round trip in C++, after QemuKernel.direct_server hands
it the server."""
from __future__ import annotations

import atexit
import ctypes
import mmap
import os
import re
import resource
import signal
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field

from .. import switches
from ..errors import DeviceAssertionError, KernelFault
from ..proton import buffers as proton_buffers
from ..proton import session as proton
from . import kernel_protocol as protocol
from .arguments import Arguments, byte_range, is_raw_pointer
from .held_addresses import held_addresses
from .settings import default_num_threads, kernel_server_options
from .settings import guest_kernel_timeout as kernel_timeout
from .source_lines import with_source_line

GUEST_SYSROOT = "/usr/riscv64-linux-gnu"
ALIGN = 64
FAULT_REPORT = "spine-fault: "  # how cpp/fault_guard.c's report of a guest fault starts
# How long a closed server may take to exit by itself (its lifeline watcher exits at once, a hung kernel
# with it) before it is killed
CLOSE_GRACE_S = 2.0
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
    return [one_insn, "-d", "exec,nochain", "-D", path, *_outside_the_emulation()]


# The kernel server's functions a trapped matrix instruction runs (cpp/fault_guard.c's signal handler,
# cpp/matrix_emulation.c's emulation, whose helpers are inlined into it)
EMULATION_FUNCTIONS = ("on_fault", "on_sigill", "spine_matrix_emulate")


def _outside_the_emulation() -> list[str]:
    """QEMU's -dfilter for every address but the kernel server's emulation of the matrix instructions. Only
    a kernel's own text is counted, but a matrix-unit kernel traps into that emulation at each matrix
    instruction, a few thousand instructions each, which the log would otherwise hold and the counter read
    line by line. The rest of the server stays in the log: its lines between two program instances are
    what separates them (spine/count). The server is linked at fixed addresses (not PIE)."""
    from elftools.elf.elffile import ELFFile
    from .toolchain import guest_kernel_server
    with open(guest_kernel_server(), "rb") as f:
        elf = ELFFile(f)
        symbols = elf.get_section_by_name(".symtab")
        if elf["e_type"] != "ET_EXEC" or symbols is None:
            return []
        skipped = sorted((sym["st_value"], sym["st_value"] + sym["st_size"]) for sym in symbols.iter_symbols()
                         if sym.name in EMULATION_FUNCTIONS and sym["st_info"]["type"] == "STT_FUNC"
                         and sym["st_size"])
    kept, start = [], 0
    for lo, hi in skipped:
        if lo > start:
            kept.append(f"{start:#x}..{lo - 1:#x}")
        start = max(start, hi)
    kept.append(f"{start:#x}..0xffffffffffffffff")
    return ["-dfilter", ",".join(kept)]


_VLEN = re.compile(r"(^|,)vlen=(\d+)")


def vlen_of(cpu: str) -> int:
    """VLEN in bits as a QEMU -cpu string sets it (QEMU's default: 128)."""
    found = _VLEN.search(cpu)
    return int(found.group(2)) if found else 128


def configured_vector_bits() -> int:
    """The VLEN SPINE_QEMU_CPU gives the guest."""
    return vlen_of(switches.QEMU_CPU.get())


def qemu_cpu(vector_bits: int = 0) -> str:
    """QEMU's `-cpu` (SPINE_QEMU_CPU) with its VLEN raised to `vector_bits` where that is more."""
    cpu = switches.QEMU_CPU.get()
    if vector_bits <= vlen_of(cpu):
        return cpu
    found = _VLEN.search(cpu)
    return (cpu[:found.start()] + f"{found.group(1)}vlen={vector_bits}" + cpu[found.end():] if found
            else f"{cpu},vlen={vector_bits}")


class QemuServer:
    """One guest process, its arena and the channel to it."""

    def __init__(self, arena_bytes: int, cpu: str | None = None):
        from .toolchain import guest_kernel_server
        self.arena_bytes = arena_bytes
        self.cpu = cpu or switches.QEMU_CPU.get()
        if not os.path.isdir(GUEST_SYSROOT):
            raise RuntimeError(f"{GUEST_SYSROOT} is missing: install Debian's libc6-riscv64-cross")
        fd = os.memfd_create("spine-arena")
        self.stderr = tempfile.TemporaryFile()
        self.proc = self.channel = None
        self._fds: list[int] = []
        try:
            os.ftruncate(fd, arena_bytes)
            self.arena = mmap.mmap(fd, arena_bytes)
            self.arena_addr = ctypes.addressof(ctypes.c_char.from_buffer(self.arena))
            request_read, request_write = os.pipe()
            reply_read, reply_write = os.pipe()
            # Only this process holds the write end (pipes are close-on-exec), so it closes when we die.
            lifeline_read, lifeline_write = os.pipe()
            self._fds = [request_write, reply_read, lifeline_write]
            self.channel = protocol.Channel(reply_read, request_write)
            cmd = [qemu_binary(), "-L", GUEST_SYSROOT, "-cpu", self.cpu, *trace_arguments(),
                   guest_kernel_server(), *kernel_server_options(), str(fd), str(arena_bytes), str(request_read), str(reply_write),
                   str(lifeline_read)]
            child_fds = (fd, request_read, reply_write, lifeline_read)
            try:
                self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stderr=self.stderr,
                                             pass_fds=child_fds, preexec_fn=_no_core_files)
            finally:
                for child_fd in child_fds[1:]:
                    os.close(child_fd)
            try:
                hello = self.request(None, b"", timeout=60)
                self.guest_cores, self.guest_arena = protocol.parse_hello(hello), protocol.hello_arena(hello)
            except protocol.ServerError as error:
                raise RuntimeError(f"QEMU kernel server failed to start: {error}") from None
        except BaseException:
            self.close()
            raise
        finally:
            os.close(fd)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def close(self) -> None:
        """Ends the guest: its lifeline closes, and the server exits by itself (QEMU then runs its own exit
        path: its log is flushed, a counting plugin writes its count); one that has not exited after
        CLOSE_GRACE_S is killed."""
        proc = getattr(self, "proc", None)
        for fd in getattr(self, "_fds", ()):
            os.close(fd)
        self._fds = []
        if proc is not None and proc.poll() is None:
            try:
                proc.wait(timeout=CLOSE_GRACE_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.proc = None

    def request(self, command: int | None, payload: bytes, timeout: float | None = None) -> bytes:
        """One request and its reply (command None: only the reply, the server's hello)."""
        return self.send(None if command is None else protocol.frame(command, payload), timeout)

    def send(self, message: bytes | None, timeout: float | None = None) -> bytes:
        """Sends a framed request and returns the reply's payload; a dead or hung server is a KernelFault.
        An exchange interrupted before its whole reply was read (Ctrl-C) closes the server: the reply still
        to come would answer the next request (a LOAD's handle read as a launch's result)."""
        try:
            return self._exchange(message, timeout)
        except (KernelFault, protocol.ServerError, DeviceAssertionError):
            raise   # the whole reply was read, or the server is gone already
        except BaseException:
            self.close()
            raise

    def _exchange(self, message: bytes | None, timeout: float | None) -> bytes:
        try:
            if message is None:
                status, body = self.channel.read_reply(timeout)
                if status != protocol.STATUS_OK:
                    raise protocol.ServerError(body.decode(errors="replace"))
                return body
            return self.channel.send(message, timeout)
        except protocol.ChannelTimeout:
            raise self.hung(timeout) from None
        except protocol.ChannelBroken as error:
            self.close()
            raise KernelFault(f"the QEMU kernel server broke the protocol: {error}; it was stopped") from None
        except protocol.ChannelClosed:
            raise self.died() from None

    def hung(self, timeout: float) -> KernelFault:
        self.close()
        return KernelFault(f"the QEMU kernel server did not answer within {timeout:.0f} s "
                           f"(SPINE_KERNEL_TIMEOUT); it was stopped")

    def died(self) -> KernelFault:
        self.proc.wait()
        return KernelFault(self._death_message())

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
    """Bytes of memory that a launch's arguments may touch, copied into the arena as one piece."""
    lo: int
    hi: int
    written: bool
    storages: set = field(default_factory=set)
    arena_offset: int = 0

    def joins(self, other: _Span) -> bool:
        return bool(self.storages & other.storages) or (self.lo < other.hi and other.lo < self.hi)

    def absorb(self, other: _Span) -> None:
        self.lo, self.hi = min(self.lo, other.lo), max(self.hi, other.hi)
        self.written = self.written or other.written
        self.storages |= other.storages


def _joined(spans: list[_Span], new: _Span) -> _Span:
    """Adds `new` to `spans`, absorbing every span it shares a storage or bytes with (transitively)."""
    for span in [s for s in spans if s.joins(new)]:
        spans.remove(span)
        new.absorb(span)
    if any(s.joins(new) for s in spans):   # the union reached further spans
        return _joined(spans, new)
    spans.append(new)
    return new


@dataclass
class ArenaLayout:
    """A launch's arguments laid out in an arena: the entry point's slots (tensors as arena offsets), the
    spans to copy in (and back, where written), the bytes they need; and for a kernel that dereferences
    addresses it reads (held_addresses.py), the scalar arguments that became arena offsets and the table
    entries to rewrite: (arena offset of the entry, the host address it holds, the arena offset of the
    copy of what that address points to)."""
    slots: list
    spans: list
    total: int
    offset_scalars: tuple = ()
    relocations: tuple = ()


def arena_layout(args: Arguments) -> ArenaLayout:
    """The layout of a launch under QEMU. Views of one storage share a span, and so do arguments whose
    bytes overlap though their storages differ (torch.frombuffer over one buffer and over a memoryview of
    it): each byte of memory has one place in the arena, so aliasing arguments behave as they do natively,
    and copying back one span never overwrites what the kernel stored through another. Tensors that held
    addresses point into get spans of their own (copied back: the kernel may store through them)."""
    spans: list[_Span] = []
    placed = []
    for param, value in zip(args.params, args.values):
        if not param.is_pointer:
            continue
        if is_raw_pointer(value):
            raise TypeError(f"argument '{param.name}' is an address alone ({type(value).__name__}): a kernel "
                            f"under QEMU or on a board works on copies of its arguments' memory, and an "
                            f"address has no extent to copy; pass the tensor (host kernels take addresses)")
        pointer, (lo, hi), storage = value.data_ptr(), byte_range(value), value.untyped_storage().data_ptr()
        _joined(spans, _Span(lo, hi, param.index in args.written, {storage}))
        placed.append((param.index, pointer, storage))
    held = held_addresses(args)
    for address in held:
        _joined(spans, _Span(address.lo, address.hi, True, {address.lo}))
    total = 0
    for span in spans:
        span.arena_offset = total
        total += (span.hi - span.lo + ALIGN - 1) // ALIGN * ALIGN
    slots = list(args.values)
    for index, pointer, storage in placed:
        span = next(s for s in spans if storage in s.storages)   # one: spans sharing a storage were joined
        slots[index] = span.arena_offset + pointer - span.lo
    if not held:
        return ArenaLayout(slots, spans, total)
    offset_scalars, relocations = set(), []
    for address in held:
        target = _arena_offset(spans, address.value)
        if address.word is None:
            slots[address.param], offset_scalars = target, offset_scalars | {address.param}
        else:
            relocations.append((_arena_offset(spans, address.word), address.value, target))
    return ArenaLayout(slots, spans, total, tuple(sorted(offset_scalars)), tuple(relocations))


def _arena_offset(spans: list[_Span], host_address: int) -> int:
    """Where the byte at `host_address` lies in the arena: in the span that holds it, else at the end of
    the one it is just past (a view ending there). Spans of separate storages may touch: an address where
    one ends and the next begins is the next one's first byte."""
    span = next((s for s in spans if s.lo <= host_address < s.hi), None) or \
        next(s for s in spans if s.hi == host_address)
    return span.arena_offset + host_address - span.lo


class QemuExecutor:
    """Keeps one QemuServer for the riscv64 kernels that need a VLEN of at least `vector_bits` (0: any),
    restarting it after a fault or to grow its arena; each start takes SPINE_QEMU_CPU as it is then, its VLEN
    raised to `vector_bits` where that is more (qemu_cpu)."""

    TARGET_LABEL = "riscv64 (QEMU user mode)"

    def __init__(self, vector_bits: int = 0):
        self.vector_bits = vector_bits
        self.server: QemuServer | None = None
        self.generation = 0
        self.lock = threading.Lock()
        self._counter = (None, None)   # (server generation, its calibrated counter)
        atexit.register(self.shutdown)

    def shutdown(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None

    def server_for(self, arena_bytes: int) -> QemuServer:
        """A live server whose arena holds `arena_bytes`; call with the lock held."""
        server = self.server
        if server is not None and server.arena_bytes >= arena_bytes and server.alive():
            return server
        self.shutdown()
        size = max(arena_bytes, switches.ARENA_MB.get() << 20)
        self.server = QemuServer(1 << (size - 1).bit_length(), qemu_cpu(self.vector_bits))
        self.generation += 1
        return self.server

    def load(self, name: str, so_path: str) -> QemuKernel:
        return QemuKernel(name, so_path, self, proton_buffers.calls_records(so_path))

    def counter(self, server: QemuServer):
        """The guest's counter (rdtime), calibrated once per server. Under QEMU user mode it reads the
        host's clock: the Counter says so (emulated=True)."""
        generation, counter = self._counter
        if generation != self.generation:
            body = server.request(protocol.CMD_COUNTER, b"", timeout=60)
            counter = proton_buffers.parse_counter(body, "riscv64", emulated=True)
            self._counter = (self.generation, counter)
        return counter


@dataclass
class QemuKernel:
    """A riscv64 kernel run by the guest server: loaded there on first launch after each server start."""
    name: str
    so_path: str
    executor: QemuExecutor = field(repr=False)
    instrumented: bool   # has proton scopes: always runs profiled, so its records never pile up
    direct_entry: int = 0
    loaded: protocol.LoadedOnServer | None = None
    generation: int = -1   # the server generation `loaded` belongs to
    _kinds: tuple = (None, b"")   # (params, their kind bytes) of the last launch

    def __call__(self, grid, args: Arguments) -> None:
        self.launch(grid, args)

    def direct_server(self, arena_bytes: int):
        """For the launch fast path (cpp/launch.cpp): takes the executor's lock and returns (handle, arena
        address, request fd, reply fd, timeout in ms or -1, the lock) of a live server whose arena holds
        `arena_bytes`, with this kernel loaded; None, without the lock, when the launch must be profiled."""
        if self.instrumented:
            return None
        lock = self.executor.lock
        lock.acquire()
        try:
            server, handle = self._loaded_on(arena_bytes)
            timeout = kernel_timeout()
            return (handle, server.arena_addr, server.channel.write_fd, server.channel.read_fd,
                    -1 if timeout is None else max(round(timeout * 1000), 1), lock)
        except BaseException:
            lock.release()
            raise

    def check(self, status: int, body: bytes) -> None:
        """Raises what a launch by the fast path ended in: status -1 the server died, -2 it did not answer in
        time, -3 the wait was interrupted (the server is stopped; the caller raises the interruption), -4 the
        reply announced a longer payload than a RUN has (the stream is out of step: the server is stopped),
        else the kernel server's reply status and payload."""
        server = self.executor.server
        if status == -3:
            self.executor.shutdown()
            return
        if status == -4:
            self.executor.shutdown()
            raise KernelFault(f"kernel '{self.name}': the QEMU kernel server's reply announced more bytes than a "
                              f"launch's reply holds; it was stopped")
        if status in (-1, -2):
            fault = server.died() if status == -1 else server.hung(kernel_timeout())
            self.executor.shutdown()
            raise KernelFault(f"kernel '{self.name}': {fault}")
        message = body.decode(errors="replace")
        if status == protocol.STATUS_ASSERTION:
            raise DeviceAssertionError(f"kernel '{self.name}': device assertion failed: {message}")
        raise RuntimeError(f"kernel '{self.name}': {message or f'unexpected reply (status {status})'}")

    def launch(self, grid, args: Arguments) -> None:
        executor = self.executor
        with executor.lock:
            layout = arena_layout(args)
            slots, spans = layout.slots, layout.spans
            server, handle = self._loaded_on(layout.total)
            arena = server.arena_addr
            for span in spans:
                ctypes.memmove(arena + span.arena_offset, span.lo, span.hi - span.lo)
            _relocate(server, layout.relocations, server.guest_arena)
            plan = proton.plan_launch(self.instrumented)
            message = protocol.run_message(handle, grid, default_num_threads(args.threads),
                                           self._kind_bytes(args.params, layout.offset_scalars), slots,
                                           None if plan is None else plan.programs)
            started, clock = time.monotonic_ns(), time.perf_counter_ns()
            try:
                body = server.send(message, timeout=kernel_timeout())
            except KernelFault as fault:
                executor.shutdown()
                raise KernelFault(f"kernel '{self.name}': {fault}") from None
            except DeviceAssertionError as failure:
                _relocate(server, layout.relocations, None)
                _copy_back(arena, spans)  # what the kernel wrote is visible, as on a GPU
                raise DeviceAssertionError(f"kernel '{self.name}': {failure}") from None
            except protocol.ServerError as error:
                raise RuntimeError(f"kernel '{self.name}': {error}") from None
            except BaseException:  # interrupted (Ctrl-C) with the reply still to come: the server is stopped
                executor.shutdown()
                raise
            wall = time.perf_counter_ns() - clock
            _relocate(server, layout.relocations, None)
            _copy_back(arena, spans)
            if plan is None or not plan.deliver:
                return
            launch = proton_buffers.launch_of(self.name, grid, executor.TARGET_LABEL, executor.counter(server), body,
                                              wall, started)
        proton.record_launch(launch, plan)

    def _loaded_on(self, arena_bytes: int) -> tuple[QemuServer, int]:
        """A live server whose arena holds `arena_bytes`, and this kernel's handle there. A server whose table
        of loaded kernels is full is replaced by a fresh one (every kernel loads again there, when next
        launched); call with the executor's lock held."""
        server = self.executor.server_for(arena_bytes)
        try:
            return server, self._handle(server)
        except protocol.KernelTableFull:
            self.executor.shutdown()
            server = self.executor.server_for(arena_bytes)
            return server, self._handle(server)

    def _handle(self, server: QemuServer) -> int:
        if self.generation != self.executor.generation:
            self.loaded = protocol.parse_load_reply(server.request(*protocol.load_request(self.so_path)))
            self.generation = self.executor.generation
        return self.loaded.handle

    def _kind_bytes(self, params, offset_scalars: tuple = ()) -> bytes:
        last, kinds = self._kinds
        if last is not params:
            kinds = bytes(protocol.KIND_ARENA_OFFSET if p.is_pointer else protocol.KIND_VALUE for p in params)
            self._kinds = (params, kinds)
        if offset_scalars:   # integer arguments that hold addresses: arena offsets now
            kinds = bytes(protocol.KIND_ARENA_OFFSET if i in offset_scalars else k for i, k in enumerate(kinds))
        return kinds


def _relocate(server: QemuServer, relocations: tuple, guest_arena: int | None) -> None:
    """Rewrites the table entries that hold addresses: with the guest's address of what they point to
    (`guest_arena`: where the server maps the arena) before the run, and with the host addresses they
    held after it, so that copying a table back never leaves guest addresses in this process's memory."""
    for entry, host_address, target in relocations:
        value = host_address if guest_arena is None else guest_arena + target
        server.arena[entry:entry + 8] = value.to_bytes(8, "little")


def _copy_back(arena: int, spans: list[_Span]) -> None:
    for span in spans:
        if span.written:
            ctypes.memmove(span.lo, arena + span.arena_offset, span.hi - span.lo)
