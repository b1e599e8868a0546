"""The guest kernel server's wire protocol (cpp/kernel_server.c): its messages, and request/reply framing
over a byte stream. Nothing here knows about QEMU: any transport that carries bytes both ways (pipes to a
local guest, a socket or serial line to a board) speaks it.

    request  = u32 command, u32 payload length, payload
    reply    = i32 status,  u32 payload length, payload     (0: success, 1: error, 2: device assertion)

The server says hello first: a success reply whose payload is its u32 core count. See kernel_server.c
for each command's payload."""
from __future__ import annotations

import os
import select
import struct
from dataclasses import dataclass

from ..errors import DeviceAssertionError

CMD_LOAD, CMD_RUN, CMD_PING, CMD_RUN_PROFILED, CMD_COUNTER = 1, 2, 3, 4, 5
STATUS_OK, STATUS_ERROR, STATUS_ASSERTION = 0, 1, 2
KIND_VALUE, KIND_ARENA_OFFSET = 0, 1

_HEADER = struct.Struct("<iI")
_RUN_HEAD = struct.Struct("<III4iI")   # request header, then handle, grid, threads, argument count


class ChannelClosed(Exception):
    """The other side closed the stream (the server died)."""


class ChannelTimeout(Exception):
    """No reply within the timeout."""


class ServerError(RuntimeError):
    """The server answered a request with an error."""


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
    return struct.unpack("<I", body)[0]


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
        DeviceAssertionError with the server's message, any other error ServerError."""
        try:
            while message:
                message = message[os.write(self.write_fd, message):]
        except OSError:
            pass  # the reply read below reports the closed stream
        status, body = self.read_reply(timeout)
        if status == STATUS_ASSERTION:
            raise DeviceAssertionError(f"device assertion failed: {body.decode(errors='replace')}")
        if status != STATUS_OK:
            raise ServerError(body.decode(errors="replace"))
        return body

    def read_reply(self, timeout: float | None) -> tuple[int, bytes]:
        status, length = _HEADER.unpack(self._read_exact(8, timeout))
        return status, self._read_exact(length, timeout) if length else b""

    def _read_exact(self, n: int, timeout: float | None) -> bytes:
        out = b""
        milliseconds = None if timeout is None else max(int(timeout * 1000), 1)
        while len(out) < n:
            if not self._poll.poll(milliseconds):
                raise ChannelTimeout()
            chunk = os.read(self.read_fd, n - len(out))
            if not chunk:
                raise ChannelClosed()
            out += chunk
        return out
