"""Runs riscv64 kernels on a board over one byte stream (SPINE_REMOTE, e.g. `ssh user@board sh`).

The kernel server (cpp/kernel_server.c in stream mode) and each kernel .so are copied to the board once,
named by their content hash, so later connections find them there. A launch is one round trip: the byte
ranges of the tensor arguments go out (grouped by storage, laid out as in the QEMU arena), the grid runs,
and the ranges the kernel may write come back; nothing else crosses. A kernel that faults ends the server
(KernelFault, with the fault's report); one that runs past SPINE_KERNEL_TIMEOUT is stopped with its
connection (KernelFault); a connection that ends during a launch, or a reply the request cannot get (a
length beyond it, a status the server never sends), raises RemoteConnectionLost. The next launch connects
anew in every case, and so does a load that finds the server's kernel table full."""
from __future__ import annotations

import atexit
import contextlib
import ctypes
import functools
import glob
import hashlib
import os
import struct
import threading
import time
from dataclasses import dataclass, field

from .. import switches
from ..errors import DeviceAssertionError, KernelFault
from ..proton import buffers as proton_buffers
from ..proton import session as proton
from . import kernel_protocol as protocol
from .arguments import Arguments
from .qemu import arena_layout
from .remote_link import START_TIMEOUT, RemoteConnectionLost, RemoteLink
from .settings import guest_kernel_timeout as kernel_timeout
from .settings import board_num_threads, kernel_server_options
from .source_lines import with_source_line

# Stream mode's own commands (cpp/kernel_server.c).
CMD_PUT, CMD_HAVE, CMD_WRITE, CMD_READ = 6, 7, 8, 9
CHUNK = 1 << 26   # largest WRITE or READ
_REPLY_HEADER = struct.Struct("<iI")
_WRITE_HEADER = struct.Struct("<IIQ")   # request header, arena offset


# The oldest glibc with riscv64: the server then runs on any riscv64 Linux board with glibc (the QEMU
# guest's server is built for the cross sysroot's 2.36, which needs 2.34 or newer on a board).
BOARD_ZIG_TARGET = "riscv64-linux-gnu.2.27"


@functools.lru_cache(maxsize=None)
def board_kernel_server() -> str:
    """cpp/kernel_server.c built for boards, in the build cache."""
    from ..zig import cached_build, zig
    from .toolchain import CPP_DIR, SERVER_SOURCES
    sources = [os.path.join(CPP_DIR, name) for name in SERVER_SOURCES]
    flags = ("-target", BOARD_ZIG_TARGET, "-O2", "-rdynamic", "-lpthread", "-ldl")
    digest = hashlib.sha256(" ".join(flags).encode())
    for path in sorted(glob.glob(os.path.join(CPP_DIR, "*.h"))) + sources:
        with open(path, "rb") as f:
            digest.update(f.read())
    return cached_build(f"kernel-server-board-{digest.hexdigest()[:16]}",
                        lambda out: zig("cc", *flags, *sources, "-o", out))


@dataclass
class Traffic:
    """What crossed the stream since the executor was made."""
    bytes_out: int = 0       # tensor bytes sent
    bytes_in: int = 0        # tensor bytes received
    files_sent: int = 0      # kernel files copied to the board
    connections: int = 0


class RemoteServer:
    """The kernel server on the board, over one RemoteLink. Requests may go out ahead of their replies."""

    def __init__(self, command: str, runner: str):
        self.link = RemoteLink(command)
        self.present: set = set()   # files known to be on the board
        try:
            with open(board_kernel_server(), "rb") as f:
                self.link.start_server(f.read(), runner, kernel_server_options())
            self.board_cores = protocol.parse_hello(self.checked(*self.reply(START_TIMEOUT, "the server's start")))
        except BaseException:
            self.link.close()
            raise

    def alive(self) -> bool:
        return self.link.alive()

    def close(self) -> None:
        self.link.close()

    def send(self, command: int, payload: bytes) -> None:
        self.send_framed(protocol.frame(command, payload))

    def send_framed(self, message) -> None:
        try:
            self.link.send(message)
        except EOFError:
            pass   # the reply read next says why

    @contextlib.contextmanager
    def _reading(self, timeout: float | None, during: str, kernel: bool):
        """Turns a reply that does not come into the error that says why. `kernel`: the reply waits for a
        kernel to finish, so a timeout means the kernel hung."""
        try:
            yield
        except protocol.ChannelBroken as error:
            self.close()
            raise RemoteConnectionLost(f"{error} during {during} (SPINE_REMOTE={self.link.command!r}); "
                                       f"the connection was closed") from None
        except TimeoutError:
            self.close()
            if kernel:
                raise KernelFault(f"the kernel server on the board did not answer within {timeout:.0f} s "
                                  f"(SPINE_KERNEL_TIMEOUT); it was stopped") from None
            raise RemoteConnectionLost(f"the board did not answer within {timeout:.0f} s during {during} "
                                       f"(SPINE_REMOTE={self.link.command!r}); the connection was closed") from None
        except EOFError:
            message = self.link.ended(f"during {during}")
            report = self.link.fault_report()
            self.close()
            if report is not None:
                raise KernelFault(f"the kernel crashed on the board: {with_source_line(report)}") from None
            raise RemoteConnectionLost(message) from None

    def reply(self, timeout: float | None, during: str = "the launch", kernel: bool = False,
              limit: int = protocol.MAX_SMALL_REPLY) -> tuple[int, bytes]:
        """One reply of at most `limit` bytes, all of it within `timeout` seconds."""
        deadline = protocol.deadline_after(timeout)
        with self._reading(timeout, during, kernel):
            status, length = _REPLY_HEADER.unpack(self.link.read_exact(8, deadline))
            protocol.checked_header(status, length, limit)
            return status, self.link.read_exact(length, deadline) if length else b""

    def receive_range(self, address: int, n: int, timeout: float | None) -> None:
        """A READ's reply, straight into memory at `address`: exactly `n` bytes, or an error."""
        deadline = protocol.deadline_after(timeout)
        with self._reading(timeout, "the launch", False):
            status, length = _REPLY_HEADER.unpack(self.link.read_exact(8, deadline))
            protocol.checked_header(status, length, n)
            if status == protocol.STATUS_OK and length != n:
                raise protocol.ChannelBroken(f"the kernel server answered a READ of {n} bytes with {length}")
            if status == protocol.STATUS_OK:
                self.link.read_into(memoryview((ctypes.c_char * n).from_address(address)).cast("B"), deadline)
                return
            body = self.link.read_exact(length, deadline) if length else b""
        self.checked(status, body)

    @staticmethod
    def checked(status: int, body: bytes) -> bytes:
        return protocol.raise_for_status(status, body)

    def request(self, command: int, payload: bytes, timeout: float | None = START_TIMEOUT) -> bytes:
        self.send(command, payload)
        return self.checked(*self.reply(timeout))

    def ensure_file(self, name: str, data: bytes, traffic: Traffic) -> None:
        """Copies `data` to the board as `name` unless a file of that name and content is there already."""
        if name in self.present:
            return
        if self.request(CMD_HAVE, hashlib.sha256(data).digest() + name.encode()) != b"\x01":
            encoded = name.encode()
            self.request(CMD_PUT, struct.pack("<I", len(encoded)) + encoded + data)
            traffic.files_sent += 1
        self.present.add(name)


def _chunks(lo: int, hi: int):
    for start in range(lo, hi, CHUNK):
        yield start, min(hi, start + CHUNK)


class RemoteExecutor:
    """Keeps one connection to the board for all riscv64 kernels, connecting again after any failure."""

    TARGET_LABEL = "riscv64 (board)"

    def __init__(self, command: str):
        self.command = command
        self.server: RemoteServer | None = None
        self.generation = 0
        self.lock = threading.Lock()
        self.traffic = Traffic()
        self._counter = (None, None)   # (connection generation, the board's calibrated counter)
        atexit.register(self.shutdown)

    def shutdown(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None

    def connected(self) -> RemoteServer:
        """A live connection; call with the lock held."""
        if self.server is not None and not self.server.alive():
            self.shutdown()
        if self.server is None:
            self.server = RemoteServer(self.command, switches.REMOTE_RUNNER.get() or "")
            self.generation += 1
            self.traffic.connections += 1
        return self.server

    def load(self, name: str, so_path: str) -> RemoteKernel:
        with open(so_path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()[:24]
        return RemoteKernel(name, so_path, self, proton_buffers.calls_records(so_path), f"kernel-{digest}.so")

    def counter(self, server: RemoteServer):
        """The board's counter (rdtime), calibrated once per connection."""
        generation, counter = self._counter
        if generation != self.generation:
            body = server.request(protocol.CMD_COUNTER, b"")
            counter = proton_buffers.parse_counter(body, "riscv64", emulated=False)
            self._counter = (self.generation, counter)
        return counter


@dataclass
class RemoteKernel:
    """A riscv64 kernel run on the board: copied there once, loaded on first launch per connection."""
    name: str
    so_path: str
    executor: RemoteExecutor = field(repr=False)
    instrumented: bool   # has proton scopes: always runs profiled, so its records never pile up
    remote_name: str     # its file name on the board (content hash)
    direct_entry: int = 0   # no fast path (cpp/launch.cpp) to a board: every launch goes through launch()
    loaded: protocol.LoadedOnServer | None = None
    generation: int = -1

    def __call__(self, grid, args: Arguments) -> None:
        self.launch(grid, args)

    def launch(self, grid, args: Arguments) -> None:
        if args.addresses:
            raise RuntimeError(f"kernel '{self.name}' dereferences addresses it reads from its arguments (a table "
                               f"of tensors' data_ptr() values, say): a board runs it on copies of its "
                               f"arguments' memory, at other addresses, and Spine translates such addresses "
                               f"only under QEMU and where kernels run in this process")
        executor = self.executor
        with executor.lock:
            try:
                launch = self._launch(grid, args)
            except DeviceAssertionError as failure:   # every reply was read: the connection stays
                raise DeviceAssertionError(f"kernel '{self.name}': {failure}") from None
            except (KernelFault, RemoteConnectionLost) as error:
                executor.shutdown()
                raise type(error)(f"kernel '{self.name}': {error}") from None
            except BaseException:
                executor.shutdown()   # replies may be left unread: the next launch connects anew
                raise
        if launch is not None:
            proton.record_launch(*launch)

    def _launch(self, grid, args: Arguments):
        """One round trip: every request goes out before the first reply is read."""
        executor = self.executor
        server, handle = self._connected_with_handle()
        layout = arena_layout(args)
        slots, spans = layout.slots, layout.spans
        writes = self._send_ranges(server, spans)
        plan = proton.plan_launch(self.instrumented)
        kinds = bytes(protocol.KIND_ARENA_OFFSET if p.is_pointer else protocol.KIND_VALUE for p in args.params)
        threads = board_num_threads(args.threads)
        started, clock = time.monotonic_ns(), time.perf_counter_ns()
        server.send_framed(protocol.run_message(handle, grid, threads, kinds, slots,
                                                None if plan is None else plan.programs))
        reads = [(span, lo, hi) for span in spans if span.written for lo, hi in _chunks(span.lo, span.hi)]
        for span, lo, hi in reads:
            server.send(CMD_READ, struct.pack("<QQ", span.arena_offset + lo - span.lo, hi - lo))
        for _ in range(writes):
            server.checked(*server.reply(START_TIMEOUT))
        status, body = server.reply(kernel_timeout(), kernel=True,
                                    limit=protocol.MAX_SMALL_REPLY if plan is None else protocol.MAX_PROFILE_REPLY)
        wall = time.perf_counter_ns() - clock
        for _, lo, hi in reads:   # what the kernel wrote comes back even after a failed assertion, as on a GPU
            server.receive_range(lo, hi - lo, START_TIMEOUT)
            executor.traffic.bytes_in += hi - lo
        body = server.checked(status, body)
        if plan is None or not plan.deliver:
            return None
        launch = proton_buffers.launch_of(self.name, grid, executor.TARGET_LABEL, executor.counter(server), body,
                                          wall, started)
        return launch, plan

    def _send_ranges(self, server: RemoteServer, spans) -> int:
        """Sends every span's bytes to its place in the board's arena; returns how many WRITEs went out."""
        writes = 0
        for span in spans:
            for lo, hi in _chunks(span.lo, span.hi):
                offset = span.arena_offset + lo - span.lo
                server.send_framed(_WRITE_HEADER.pack(CMD_WRITE, 8 + hi - lo, offset))
                server.send_framed(memoryview((ctypes.c_char * (hi - lo)).from_address(lo)).cast("B"))
                self.executor.traffic.bytes_out += hi - lo
                writes += 1
        return writes

    def _connected_with_handle(self) -> tuple[RemoteServer, int]:
        """The connection and this kernel's handle there. A full kernel table is left behind with its
        connection: a new server starts empty, and every kernel loads again there (its generation)."""
        executor = self.executor
        server = executor.connected()
        try:
            return server, self._handle(server)
        except protocol.KernelTableFull:
            executor.shutdown()
        server = executor.connected()
        return server, self._handle(server)

    def _handle(self, server: RemoteServer) -> int:
        if self.generation != self.executor.generation:
            with open(self.so_path, "rb") as f:
                server.ensure_file(self.remote_name, f.read(), self.executor.traffic)
            reply = server.request(protocol.CMD_LOAD, f"./{self.remote_name}".encode())
            self.loaded = protocol.parse_load_reply(reply)
            self.generation = self.executor.generation
        return self.loaded.handle


@functools.lru_cache(maxsize=None)
def remote_executor(command: str) -> RemoteExecutor:
    """One executor per SPINE_REMOTE command."""
    return RemoteExecutor(command)
