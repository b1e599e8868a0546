"""The kernel server (cpp/kernel_server.c) against bad requests, in both of its modes: started as QemuServer
starts it (a shared arena and pipes) and as the remote path starts it (stream mode through a local shell
that runs it under QEMU, the stand-in board of test_remote.py). Every bad request gets an error reply and
the server keeps serving; the harness here is shared with the protocol fuzzer (test_protocol_fuzz.py,
bench/protocol_fuzz.py)."""
from __future__ import annotations

import functools
import hashlib
import os
import shutil
import struct
import subprocess
import tempfile
from dataclasses import dataclass, field

import pytest

from spine import switches
from spine.driver import kernel_protocol as protocol
from spine.driver.qemu import GUEST_SYSROOT, QemuServer, qemu_binary
from spine.driver.remote import CMD_HAVE, CMD_PUT, CMD_READ, CMD_WRITE, RemoteServer
from spine.driver.remote_link import RemoteConnectionLost
from spine.errors import KernelFault

ARENA_BYTES = 1 << 20
TIMEOUT = 20.0
POKE_BYTES = 16   # the most poke_kernel stores


class Hung(Exception):
    """No whole reply within the timeout (the server was stopped)."""


class Died(Exception):
    """The server's stream ended; `returncode` says how the server ended."""

    def __init__(self, message: str, returncode):
        super().__init__(message)
        self.returncode = returncode


POKE_SOURCE = r"""
#include <stdint.h>
/* stores `value` at out[0 : min(n, 16)] */
void spine_entry(void **args, int32_t px, int32_t py, int32_t pz, int32_t nx, int32_t ny, int32_t nz) {
    int8_t *out = *(int8_t **)args[0];
    int32_t value = *(int32_t *)args[1], n = *(int32_t *)args[2];
    for (int32_t i = 0; i < n && i < 16; i++) out[i] = (int8_t)value;
}
"""


@functools.lru_cache(maxsize=None)
def poke_so() -> bytes:
    """A riscv64 kernel object (its spine_entry stores `value` at out_ptr[0 : min(n, 16)]), written in C so
    that these tests need the server and QEMU only, not the compiler."""
    from spine.zig import zig
    with tempfile.TemporaryDirectory() as directory:
        source, out = os.path.join(directory, "poke.c"), os.path.join(directory, "poke.so")
        with open(source, "w") as f:
            f.write(POKE_SOURCE)
        zig("cc", "-target", "riscv64-linux-gnu", "-shared", "-fPIC", "-O2", source, "-o", out)
        with open(out, "rb") as f:
            return f.read()


def run_payload(handle: int, grid, threads: int, kinds: bytes, slots: list[int], nargs: int | None = None) -> bytes:
    """A RUN request (framed); `nargs` may lie about the argument count."""
    message = protocol.run_message(handle, grid, threads, kinds, slots)
    if nargs is not None:
        message = message[:28] + struct.pack("<I", nargs) + message[32:]
    return message


def poke_message(handle: int, offset: int, value: int, n: int) -> bytes:
    return run_payload(handle, (1, 1, 1), 1, bytes([protocol.KIND_ARENA_OFFSET, 0, 0]), [offset, value, n])


@dataclass
class QemuGuest:
    """The server as QemuServer starts it; the arena is the host's mapping of it."""
    so_dir: str
    server: QemuServer = field(init=False)
    mode: str = "qemu"

    def __post_init__(self):
        self.server = QemuServer(ARENA_BYTES)

    @property
    def arena_bytes(self) -> int:
        return ARENA_BYTES

    def exchange(self, message: bytes, timeout: float = TIMEOUT) -> tuple[int, bytes]:
        """Sends raw bytes and reads one reply as the host does."""
        channel = self.server.channel
        try:
            view = memoryview(message)
            while view:
                view = view[os.write(channel.write_fd, view):]
        except OSError:
            pass
        try:
            return channel.read_reply(timeout, protocol.reply_limit(message))
        except protocol.ChannelTimeout:
            self.server.close()
            raise Hung(f"no reply within {timeout} s") from None
        except protocol.ChannelClosed as closed:
            self.server.proc.wait(timeout=30)
            raise Died(str(closed) or "the stream closed", self.server.proc.returncode) from None

    def load(self, name: str, data: bytes) -> int:
        path = os.path.join(self.so_dir, name)
        if not os.path.exists(path):
            with open(path, "wb") as f:
                f.write(data)
        status, body = self.exchange(protocol.frame(protocol.CMD_LOAD, path.encode()))
        assert status == protocol.STATUS_OK, body
        return protocol.parse_load_reply(body).handle

    def arena_read(self, offset: int, n: int) -> bytes:
        return bytes(self.server.arena[offset:offset + n])

    def arena_write(self, offset: int, data: bytes) -> None:
        self.server.arena[offset:offset + len(data)] = data

    def end_stream(self, partial: bytes) -> int | None:
        """Sends `partial` (a request cut short), ends the stream and returns how the server ended."""
        os.write(self.server.channel.write_fd, partial)
        self.server.channel.cut_off()
        return _exit_status(self.server.proc)

    def alive(self) -> bool:
        return self.server.alive()

    def close(self) -> None:
        self.server.close()


def _exit_status(proc) -> int | None:
    """How the server's process ended, or None if it did not within 30 s."""
    try:
        return proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        return None


def board_command(board_dir: str) -> tuple[str, str]:
    """SPINE_REMOTE and SPINE_REMOTE_RUNNER of a stand-in board whose cache lies under `board_dir`."""
    return (f"env XDG_CACHE_HOME={board_dir} sh",
            f"{qemu_binary()} -L {GUEST_SYSROOT} -cpu {switches.QEMU_CPU.get()}")


@dataclass
class BoardGuest:
    """The server in stream mode, started through a local shell as on a board; the arena is the server's own,
    filled and read by WRITE and READ."""
    board_dir: str
    server: RemoteServer = field(init=False)
    mode: str = "stream"

    def __post_init__(self):
        self.server = RemoteServer(*board_command(self.board_dir))

    @property
    def arena_bytes(self) -> int:
        return ARENA_BYTES   # the first WRITE (arena_write below) grows it to this

    def exchange(self, message: bytes, timeout: float = TIMEOUT) -> tuple[int, bytes]:
        command = struct.unpack_from("<I", message)[0] if len(message) >= 4 else None
        limit = protocol.reply_limit(message)
        if command == CMD_READ and len(message) >= 24:
            limit = min(struct.unpack_from("<Q", message, 16)[0], 0xFFFFFFFF)
        self.server.send_framed(message)
        try:
            return self.server.reply(timeout, "the test", limit=limit)
        except KernelFault as fault:
            raise Hung(str(fault)) from None
        except RemoteConnectionLost as lost:
            if "did not answer" in str(lost):
                raise Hung(str(lost)) from None
            self.server.link.proc.wait(timeout=30)
            raise Died(str(lost), self.server.link.proc.returncode) from None

    def load(self, name: str, data: bytes) -> int:
        status, body = self.exchange(put_message(name, data))
        assert status == protocol.STATUS_OK, body
        status, body = self.exchange(protocol.frame(protocol.CMD_LOAD, f"./{name}".encode()))
        assert status == protocol.STATUS_OK, body
        return protocol.parse_load_reply(body).handle

    def arena_read(self, offset: int, n: int) -> bytes:
        status, body = self.exchange(protocol.frame(CMD_READ, struct.pack("<QQ", offset, n)))
        assert status == protocol.STATUS_OK, body
        return body

    def arena_write(self, offset: int, data: bytes) -> None:
        status, body = self.exchange(write_message(offset, data))
        assert status == protocol.STATUS_OK, body

    def end_stream(self, partial: bytes) -> int | None:
        link = self.server.link
        link.send(partial)
        link.proc.stdin.close()
        return _exit_status(link.proc)

    def alive(self) -> bool:
        return self.server.alive()

    def close(self) -> None:
        self.server.close()


def write_message(offset: int, data: bytes, length: int | None = None) -> bytes:
    return struct.pack("<IIQ", CMD_WRITE, 8 + len(data) if length is None else length, offset) + data


def put_message(name: str, data: bytes) -> bytes:
    encoded = name.encode()
    return protocol.frame(CMD_PUT, struct.pack("<I", len(encoded)) + encoded + data)


def have_message(name: str, data: bytes) -> bytes:
    return protocol.frame(CMD_HAVE, hashlib.sha256(data).digest() + name.encode())


def start_guest(mode: str, directory: str):
    guest = QemuGuest(directory) if mode == "qemu" else BoardGuest(directory)
    if mode == "stream":
        guest.arena_write(0, bytes(ARENA_BYTES))
    return guest


needs_qemu = pytest.mark.skipif(not (shutil.which("qemu-riscv64") or os.environ.get("SPINE_QEMU")),
                                reason="qemu-riscv64 is needed")


@pytest.fixture(scope="module")
def poke():
    return poke_so()


@pytest.fixture(params=["qemu", "stream"])
def guest(request, tmp_path):
    started = start_guest(request.param, str(tmp_path))
    yield started
    started.close()


def _refused(guest, message: bytes, match: str) -> None:
    status, body = guest.exchange(message)
    assert status == protocol.STATUS_ERROR and match in body.decode(), body
    assert guest.exchange(protocol.frame(protocol.CMD_PING, b"")) == (0, b"")


@needs_qemu
def test_a_run_offset_outside_the_arena_is_refused(guest, poke):
    handle = guest.load("poke.so", poke)
    _refused(guest, poke_message(handle, 1 << 40, 9, POKE_BYTES), "outside the arena")
    _refused(guest, poke_message(handle, 2**64 - 8, 9, POKE_BYTES), "outside the arena")
    assert guest.exchange(poke_message(handle, 100, 9, 4)) == (0, b"")
    assert guest.arena_read(96, 12) == bytes(4) + b"\x09" * 4 + bytes(4)


@needs_qemu
def test_run_arguments_must_match_the_payload(guest, poke):
    handle = guest.load("poke.so", poke)
    _refused(guest, run_payload(handle, (1, 1, 1), 1, b"\x01\x00\x00", [0, 9, 4], nargs=2**32 - 1), "argument count")
    _refused(guest, run_payload(handle, (1, 1, 1), 1, b"\x01\x00\x00", [0, 9, 4], nargs=40), "argument count")
    _refused(guest, run_payload(handle, (1, 1, 1), 1, b"\x07\x00\x00", [0, 9, 4]), "unknown kind")
    _refused(guest, run_payload(handle + 5, (1, 1, 1), 1, b"\x01\x00\x00", [0, 9, 4]), "unknown kernel handle")
    _refused(guest, run_payload(handle, (1, -1, 1), 1, b"\x01\x00\x00", [0, 9, 4]), "negative grid")
    _refused(guest, run_payload(handle, (2**31 - 1,) * 3, 1, b"\x01\x00\x00", [0, 9, 4]), "too many programs")
    _refused(guest, run_payload(handle, (1, 1, 1), 2**31 - 1, b"\x01\x00\x00", [0, 9, 4]), "thread count")


@needs_qemu
def test_bad_loads_are_refused(guest):
    for name in (b"", b"poke\x00.so", b"/nonexistent/kernel.so", b"x" * 5000):
        status, body = guest.exchange(protocol.frame(protocol.CMD_LOAD, name))
        assert status == protocol.STATUS_ERROR and body, (name, body)
    if guest.mode == "stream":
        _refused(guest, protocol.frame(protocol.CMD_LOAD, b"../kernel.so"), "not a file in the server's directory")
    _refused(guest, protocol.frame(77, b"abc"), "unknown command")


@needs_qemu
def test_a_length_beyond_the_command_is_answered_at_once(guest):
    status, body = guest.exchange(struct.pack("<II", protocol.CMD_LOAD, 2**32 - 1), timeout=10)
    assert status == protocol.STATUS_ERROR and b"longer than its command allows" in body


@needs_qemu
def test_a_write_past_the_largest_arena_is_refused(tmp_path):
    guest = start_guest("stream", str(tmp_path))
    try:
        # offset + length wrapped past 2^64 and passed the bound; 2^63 made the arena's growth spin forever
        _refused(guest, write_message(2**64 - 8, b"\xee" * 16), "beyond the largest arena")
        _refused(guest, write_message(2**63, b"\xee" * 16), "beyond the largest arena")
        _refused(guest, write_message(2**36 - 8, b"\xee" * 16), "beyond the largest arena")
        guest.arena_write(ARENA_BYTES - 4, b"\x01\x02\x03\x04")
        assert guest.arena_read(ARENA_BYTES - 8, 8) == bytes(4) + b"\x01\x02\x03\x04"
    finally:
        guest.close()


@needs_qemu
def test_a_read_outside_the_arena_is_refused(tmp_path):
    guest = start_guest("stream", str(tmp_path))
    try:
        # at[0] + at[1] wrapped: the server answered bytes from below its arena
        for offset, n in ((2**64 - 16, 32), (ARENA_BYTES - 4, 8), (ARENA_BYTES + 1, 0)):
            status, body = guest.exchange(protocol.frame(CMD_READ, struct.pack("<QQ", offset, n)))
            assert status == protocol.STATUS_ERROR and b"outside the arena" in body
        assert guest.arena_read(ARENA_BYTES, 0) == b""
    finally:
        guest.close()


@needs_qemu
def test_have_answers_yes_only_for_the_content_asked_for(tmp_path):
    guest = start_guest("stream", str(tmp_path))
    try:
        for size in (0, 1, 55, 56, 63, 64, 65, 1000, 70000):   # every padding case of the server's SHA-256
            data = bytes((i * 7 + size) % 251 for i in range(size))
            assert guest.exchange(put_message(f"file-{size}", data)) == (0, b"")
            assert guest.exchange(have_message(f"file-{size}", data)) == (0, b"\x01")
            assert guest.exchange(have_message(f"file-{size}", data + b"x")) == (0, b"\x00")
        assert guest.exchange(have_message("missing", b"")) == (0, b"\x00")
        _refused(guest, have_message("../file-1", b""), "not a plain file name")
    finally:
        guest.close()


@needs_qemu
def test_a_full_kernel_table_is_its_own_status(guest, poke, monkeypatch):
    guest.close()
    monkeypatch.setenv("SPINE_SERVER_KERNEL_SLOTS", "2")
    guest.__post_init__()
    if guest.mode == "stream":
        guest.arena_write(0, bytes(16))
    first = guest.load("a.so", poke)
    assert guest.load("a.so", poke) == first   # the same entry point: its first handle
    second = guest.load("b.so", poke)          # another file: another copy of the code
    assert second != first
    with pytest.raises(AssertionError):
        guest.load("c.so", poke)
    status, body = guest.exchange(protocol.frame(protocol.CMD_LOAD, guest_path(guest, "c.so")))
    assert status == protocol.STATUS_TABLE_FULL and b"kernel table is full" in body
    with pytest.raises(protocol.KernelTableFull):
        protocol.raise_for_status(status, body)
    assert guest.exchange(poke_message(second, 8, 3, 2)) == (0, b"")


def guest_path(guest, name: str) -> bytes:
    return (os.path.join(guest.so_dir, name) if guest.mode == "qemu" else f"./{name}").encode()


@needs_qemu
def test_a_request_cut_short_by_the_stream_ending_ends_the_server_cleanly(guest):
    assert guest.end_stream(write_message(0, b"abc", length=1000)[:20]) == 0
