"""The guest kernel server's wire protocol (cpp/kernel_server.c): its messages, and request/reply framing
over a byte stream. Nothing here knows about QEMU: any transport that carries bytes both ways (pipes to a
local guest, a socket or serial line to a board) speaks it.

    request  = u32 command, u32 payload length, payload
    reply    = i32 status,  u32 payload length, payload     (0: success, 1: error, 2: device assertion,
                                                             3: the kernel table is full)

The server says hello first: a success reply whose payload is its u32 core count (and, from a server that
shares its arena with this process, where it maps the arena). See kernel_server.c for each command's
payload.

A reply is believed only as far as its request allows: a length longer than the request can get, or a
status the server never sends, means the stream is out of step (or the other side is not the server),
so the channel is cut off rather than trusted (ChannelBroken). A timeout bounds the whole reply."""
from __future__ import annotations

import os
import select
import struct
import time
from dataclasses import dataclass

from ..errors import DeviceAssertionError

CMD_LOAD, CMD_RUN, CMD_PING, CMD_RUN_PROFILED, CMD_COUNTER = 1, 2, 3, 4, 5
STATUS_OK, STATUS_ERROR, STATUS_ASSERTION, STATUS_TABLE_FULL = 0, 1, 2, 3
KIND_VALUE, KIND_ARENA_OFFSET = 0, 1
# The longest reply other than a profile block or a READ: the server's messages are under 1 KiB.
MAX_SMALL_REPLY = 4096
# A profile block has no bound its request sets (scopes inside loops): only the length field's. Its
# bytes are stored as they arrive, so a length that lies costs no memory.
MAX_PROFILE_REPLY = 0xFFFFFFFF
_READ_STEP = 1 << 20   # bytes taken off the stream per read: memory follows what arrived, not what was announced

_HEADER = struct.Struct("<iI")
_RUN_HEAD = struct.Struct("<III4iI")   # request header, then handle, grid, threads, argument count


class ChannelClosed(Exception):
    """The other side closed the stream (the server died)."""


class ChannelBroken(ChannelClosed):
    """The other side broke the protocol (a reply longer than its request can get, a status the server
    never sends): nothing more on the stream can be trusted, so the channel was cut off."""


class ChannelTimeout(Exception):
    """No reply within the timeout."""


class ServerError(RuntimeError):
    """The server answered a request with an error."""


class KernelTableFull(ServerError):
    """The server's table of loaded kernels is full: a new server (an empty table) loads it."""


@dataclass(frozen=True)
class LoadedOnServer:
    handle: int
    text: tuple[int, int]   # the kernel's executable code in the guest (instruction tracing)


def load_request(so_path: str) -> tuple[int, bytes]:
    return CMD_LOAD, so_path.encode()


def parse_load_reply(body: bytes) -> LoadedOnServer:
    handle, text_lo, text_hi = struct.unpack("<IQQ", body)
    return LoadedOnServer(handle, (text_lo, text_hi))


def parse_hello(body: bytes) -> int:
    """The server's core count."""
    return struct.unpack_from("<I", body)[0]


def hello_arena(body: bytes) -> int | None:
    """Where a server sharing its arena with this process (QEMU mode) maps it, in its own address space:
    a kernel there dereferences guest addresses (held_addresses.py); None from a server that owns its
    arena (stream mode)."""
    return struct.unpack_from("<Q", body, 8)[0] if len(body) >= 16 else None


def run_message(handle: int, grid, threads: int, kinds: bytes, slots: list[int], record_programs=None) -> bytes:
    """A whole RUN request (RUN_PROFILED when `record_programs` is given), framed: one write sends it."""
    n = len(slots)
    body = kinds + bytes(-(24 + n) % 8) + struct.pack(f"<{n}Q", *slots)
    if record_programs is None:
        return _RUN_HEAD.pack(CMD_RUN, 24 + len(body), handle, grid[0], grid[1], grid[2], threads, n) + body
    return (struct.pack("<III", CMD_RUN_PROFILED, 28 + len(body), int(record_programs))
            + _RUN_HEAD.pack(0, 0, handle, grid[0], grid[1], grid[2], threads, n)[8:] + body)


def frame(command: int, payload: bytes) -> bytes:
    return struct.pack("<II", command, len(payload)) + payload


def reply_limit(message) -> int:
    """The longest reply the framed request `message` can get."""
    command = struct.unpack_from("<I", message)[0] if len(message) >= 4 else None
    return MAX_PROFILE_REPLY if command == CMD_RUN_PROFILED else MAX_SMALL_REPLY


def checked_header(status: int, length: int, limit: int) -> None:
    """Raises ChannelBroken for a reply header the server would never send in answer to a request whose
    reply is at most `limit` bytes."""
    if status not in (STATUS_OK, STATUS_ERROR, STATUS_ASSERTION, STATUS_TABLE_FULL):
        raise ChannelBroken(f"the kernel server answered with status {status}, which it never sends")
    if length > (limit if status == STATUS_OK else MAX_SMALL_REPLY):
        raise ChannelBroken(f"the kernel server announced a reply of {length} bytes to a request that gets at "
                            f"most {limit if status == STATUS_OK else MAX_SMALL_REPLY}")


def raise_for_status(status: int, body: bytes) -> bytes:
    """The body of a successful reply; else the error the reply reports."""
    if status == STATUS_ASSERTION:
        raise DeviceAssertionError(f"device assertion failed: {body.decode(errors='replace')}")
    if status == STATUS_TABLE_FULL:
        raise KernelTableFull(body.decode(errors="replace"))
    if status != STATUS_OK:
        raise ServerError(body.decode(errors="replace"))
    return body


def deadline_after(timeout: float | None) -> float | None:
    return None if timeout is None else time.monotonic() + timeout


def seconds_left(deadline: float | None) -> float | None:
    """None: no deadline; else at least 0."""
    return None if deadline is None else max(deadline - time.monotonic(), 0.0)


class Channel:
    """Request/reply framing over two file descriptors (a stream each way)."""

    def __init__(self, read_fd: int, write_fd: int):
        self.read_fd, self.write_fd = read_fd, write_fd
        self._poll = select.poll()
        self._poll.register(read_fd, select.POLLIN)

    def request(self, command: int, payload: bytes, timeout: float | None = None) -> bytes:
        return self.send(frame(command, payload), timeout)

    def send(self, message: bytes, timeout: float | None = None) -> bytes:
        """Sends one framed request and returns the reply's payload; a failed device assertion raises
        DeviceAssertionError with the server's message, a full kernel table KernelTableFull, any other
        error ServerError. `timeout` bounds the whole reply."""
        limit = reply_limit(message)
        try:
            view = memoryview(message)
            while view:
                view = view[os.write(self.write_fd, view):]
        except OSError:
            pass  # the reply read below reports the closed stream
        return raise_for_status(*self.read_reply(timeout, limit))

    def read_reply(self, timeout: float | None, limit: int = MAX_SMALL_REPLY) -> tuple[int, bytes]:
        """One reply of at most `limit` bytes, whole within `timeout` seconds (ChannelTimeout); any
        other reply cuts the channel off (ChannelBroken)."""
        deadline = deadline_after(timeout)
        status, length = _HEADER.unpack(self._read_exact(8, deadline))
        try:
            checked_header(status, length, limit)
        except ChannelBroken:
            self.cut_off()
            raise
        return status, self._read_exact(length, deadline) if length else b""

    def cut_off(self) -> None:
        """Ends both streams while keeping their descriptors, which belong to whoever made the channel:
        /dev/null takes their place, so the server reads the end of its requests and exits, and every
        later reply read here finds the stream closed."""
        null = os.open(os.devnull, os.O_RDWR)
        try:
            for fd in (self.read_fd, self.write_fd):
                os.dup2(null, fd, inheritable=False)
        finally:
            os.close(null)

    def _read_exact(self, n: int, deadline: float | None) -> bytes:
        out = bytearray()
        while len(out) < n:
            left = seconds_left(deadline)
            if left == 0 or not self._poll.poll(None if left is None else max(int(left * 1000), 1)):
                raise ChannelTimeout()
            chunk = os.read(self.read_fd, min(n - len(out), _READ_STEP))
            if not chunk:
                raise ChannelClosed()
            out += chunk
        return bytes(out)
