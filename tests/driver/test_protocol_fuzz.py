"""Fuzzing the kernel server protocol from both ends.

The server (cpp/kernel_server.c), in QEMU mode (shared arena and pipes, as QemuServer starts it) and in
stream mode (through a local shell, as the remote path starts it), gets malformed and hostile frames:
random commands, lengths that lie, huge lengths, offsets near 2^64, truncated requests followed by the
stream's end. It must answer each complete request (an error with a message when the request is bad),
never crash, never write outside its arena (the arena is checked against a model of what the accepted
requests wrote), and a request whose length lies must end in the host's timeout (the server is then
replaced) or an error at once. The host's readers (kernel_protocol.Channel, RemoteServer) get malformed
replies from fake servers: each must end in a clear error within its timeout, allocating no more than
arrived.

The seeded runs here are short; bench/protocol_fuzz.py runs the same properties for thousands of frames."""
from __future__ import annotations

import os
import struct
import sys
import threading
import time
import tracemalloc
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spine.driver import kernel_protocol as protocol
from spine.driver.remote import CMD_HAVE, CMD_PUT, CMD_READ, CMD_WRITE, RemoteServer
from spine.driver.remote_link import RemoteConnectionLost, RemoteLink
from spine.errors import DeviceAssertionError, KernelFault
from tests.driver.test_kernel_server import (ARENA_BYTES, POKE_BYTES, Died, Hung, needs_qemu, poke_message, poke_so,
                                             run_payload, start_guest, write_message)

U64 = 2**64 - 1
HONEST_TIMEOUT = 30.0   # a complete request's reply (generous: QEMU on a busy machine)
LYING_TIMEOUT = 1.0     # a request whose length lies: the server waits for bytes that never come
OFFSETS = st.sampled_from([0, 1, 7, 4096, ARENA_BYTES - POKE_BYTES, ARENA_BYTES - 8, ARENA_BYTES - 1, ARENA_BYTES,
                           ARENA_BYTES + 1, 2**36 - 8, 2**36, 2**40, 2**63 - 1, 2**63, U64 - 15, U64 - 7, U64]) \
    | st.integers(0, U64)


@dataclass
class Stats:
    frames: int = 0
    ok_replies: int = 0
    error_replies: int = 0
    restarts: int = 0
    stream_ends: int = 0
    crashes: int = 0
    hangs: int = 0
    wrong: list = field(default_factory=list)   # replies other than the one expected

    def line(self) -> str:
        return (f"frames sent {self.frames}, ok replies {self.ok_replies}, error replies {self.error_replies}, "
                f"server restarts {self.restarts} (stream ends {self.stream_ends}), crashes {self.crashes}, "
                f"hangs {self.hangs}, wrong replies {len(self.wrong)}")


@dataclass
class Frame:
    message: bytes
    expect: str                  # "ok", "error", "any" (either), "lie" (no whole request), "end" (then the stream ends)
    writes: tuple = ()           # (offset, bytes) an accepted request puts in the arena


@dataclass
class Session:
    """One server at a time, its arena's model, and what happened."""
    mode: str
    directory: str
    poke: bytes
    stats: Stats
    guest: object = None
    handle: int = 0
    arena: int = ARENA_BYTES     # the arena's size: a board's grows with the WRITEs it accepts
    model: bytearray = field(default_factory=bytearray)   # the arena's first ARENA_BYTES

    def live(self):
        if self.guest is None or not self.guest.alive():
            if self.guest is not None:
                self.guest.close()
            self.guest = start_guest(self.mode, self.directory)
            self.handle = self.guest.load("poke.so", self.poke)
            self.model = bytearray(self.guest.arena_read(0, ARENA_BYTES))
            self.arena = ARENA_BYTES
        return self.guest

    def replace(self) -> None:
        self.guest.close()
        self.guest = None
        self.stats.restarts += 1

    def send(self, frame: Frame) -> None:
        guest = self.live()
        self.stats.frames += 1
        if frame.expect == "end":
            code = guest.end_stream(frame.message)
            self.stats.stream_ends += 1
            if code is None:
                self.stats.hangs += 1
            elif code != 0:
                self.stats.crashes += 1
                self.stats.wrong.append((frame, f"the server ended with {code} at the stream's end"))
            return self.replace()
        try:
            status, body = guest.exchange(frame.message, LYING_TIMEOUT if frame.expect == "lie" else HONEST_TIMEOUT)
        except Hung as hung:
            if frame.expect != "lie":
                self.stats.hangs += 1
                self.stats.wrong.append((frame, str(hung)))
            return self.replace()
        except Died as died:
            self.stats.crashes += 1
            self.stats.wrong.append((frame, f"{died} ({died.returncode})"))
            return self.replace()
        self._judge(frame, status, body)
        if frame.expect == "lie":   # answered at once; the bytes it announced would be taken as its payload
            self.replace()

    def _judge(self, frame: Frame, status: int, body: bytes) -> None:
        if status == protocol.STATUS_OK:
            self.stats.ok_replies += 1
            for offset, data in frame.writes:
                self._wrote(offset, data)
        elif status == protocol.STATUS_ERROR and body:
            self.stats.error_replies += 1
        wanted = {"ok": (protocol.STATUS_OK,), "error": (protocol.STATUS_ERROR,), "lie": (protocol.STATUS_ERROR,),
                  "any": (protocol.STATUS_OK, protocol.STATUS_ERROR)}[frame.expect]
        if status not in wanted or (status == protocol.STATUS_ERROR and not body):
            self.stats.wrong.append((frame, (status, body)))

    def _wrote(self, offset: int, data: bytes) -> None:
        if self.mode == "stream" and offset + len(data) > self.arena:
            self.arena = 1 << (offset + len(data) - 1).bit_length()
        kept = data[:max(0, ARENA_BYTES - offset)]
        self.model[offset:offset + len(kept)] = kept

    def check_arena(self) -> None:
        """Every arena byte is what the accepted requests put there: nothing else wrote it."""
        if self.guest is None or not self.guest.alive():
            return
        if self.guest.arena_read(0, ARENA_BYTES) != bytes(self.model):
            self.stats.wrong.append((None, "the arena differs from what the accepted requests wrote"))
        status, _ = self.guest.exchange(protocol.frame(protocol.CMD_PING, b""), HONEST_TIMEOUT)
        if status != protocol.STATUS_OK:
            self.stats.wrong.append((None, "PING failed"))

    def close(self) -> None:
        if self.guest is not None:
            self.guest.close()
            self.guest = None


# -- frames --------------------------------------------------------------------------------------------------

def random_frame(draw) -> Frame:
    command = draw(st.sampled_from([0, 10, 11, 255, 2**31, U64 >> 32]) | st.integers(0, 2**32 - 1))
    payload = draw(st.binary(max_size=48))
    known = 1 <= command <= 9
    return Frame(protocol.frame(command, payload), "any" if known else "error")


def run_frame(draw, session: Session) -> Frame:
    """A RUN of poke_kernel with at most one field made hostile."""
    arena = session.arena
    bad = draw(st.sampled_from(["none", "none", "none", "offset", "grid", "threads", "kinds", "handle", "nargs"]))
    # strategies never depend on the session (hypothesis replays its choices): only the expectations do
    offset = draw(OFFSETS if bad == "offset" else st.integers(0, ARENA_BYTES - POKE_BYTES))
    value, n = draw(st.integers(0, 255)), draw(st.integers(-2, 20))
    if offset > arena - POKE_BYTES:
        n = 0   # a kernel's own extent past its pointer is the host layout's business, not the server's
    grid = draw(st.sampled_from([(-1, 1, 1), (1, 1, -5), (2**31 - 1,) * 3, (2**31 - 1, 2**31 - 1, 2)] if bad == "grid"
                                else [(1, 1, 1), (2, 1, 1), (0, 1, 1), (1, 3, 2)]))
    threads = draw(st.sampled_from([-1, 4097, 2**31 - 1] if bad == "threads" else [0, 1, 2]))
    kinds = bytes(draw(st.sampled_from([[2, 0, 0], [255, 0, 0], [1, 3, 0], [1, 0, 9]]))) if bad == "kinds" \
        else b"\x01\x00\x00"
    handle = draw(st.sampled_from([session.handle + 1, 2**32 - 1])) if bad == "handle" else session.handle
    nargs = draw(st.sampled_from([0, 2, 4, 2**31, 2**32 - 1])) if bad == "nargs" else None
    message = run_payload(handle, grid, threads, kinds, [offset, value, n & U64], nargs)
    valid = bad == "none" or (bad == "offset" and offset <= arena)
    stored = max(0, min(n, POKE_BYTES)) if min(grid) > 0 else 0
    writes = ((offset, bytes([value]) * stored),) if stored else ()
    return Frame(message, "ok" if valid else "error", writes)


def write_frame(draw, session: Session) -> Frame:
    arena = session.arena
    offset = draw(OFFSETS | st.integers(0, ARENA_BYTES - 24))
    data = draw(st.binary(max_size=24))
    inside = offset + len(data) <= arena
    if session.mode == "qemu":
        return Frame(write_message(offset, data), "error")
    if not inside and offset + len(data) <= 2**36:   # grows the arena, or is out of memory
        return Frame(write_message(offset, data), "any", ((offset, data),))
    return Frame(write_message(offset, data), "ok" if inside else "error", ((offset, data),) if inside else ())


def read_frame(draw, session: Session) -> Frame:
    offset, n = draw(OFFSETS), draw(st.sampled_from([0, 1, 16, ARENA_BYTES, 2**32, U64]) | st.integers(0, 64))
    inside = offset + n <= session.arena and session.mode == "stream"
    return Frame(protocol.frame(CMD_READ, struct.pack("<QQ", offset, n)), "ok" if inside else "any")


def name_frame(draw, session: Session) -> Frame:
    name = draw(st.sampled_from([b"", b".", b"..", b"../poke.so", b"/etc/passwd", b"poke.so\x00x", b"a/b",
                                 b"x" * 300, b"\xff\xfe"]) | st.binary(min_size=1, max_size=40))
    command = draw(st.sampled_from([protocol.CMD_LOAD, CMD_HAVE, CMD_PUT]))
    if command == CMD_HAVE:
        payload = draw(st.binary(min_size=0, max_size=40)) + name
    elif command == CMD_PUT:
        length = draw(st.sampled_from([len(name), 0, 2**32 - 1, len(name) + 100]))
        payload = struct.pack("<I", length) + name + draw(st.binary(max_size=16))
    else:
        payload = name
    return Frame(protocol.frame(command, payload), "any")


def lying_frame(draw, session: Session) -> Frame:
    """A request whose length announces more than follows; or one cut short as the stream ends."""
    honest = draw(st.sampled_from(["run", "write", "load", "random"]))
    message = {"run": lambda: poke_message(session.handle, 0, 1, 1),
               "write": lambda: write_message(0, b"abcd"),
               "load": lambda: protocol.frame(protocol.CMD_LOAD, b"poke.so"),
               "random": lambda: protocol.frame(draw(st.integers(0, 12)), b"xy")}[honest]()
    announced = draw(st.sampled_from([len(message) - 8 + 1, len(message) - 8 + 4096, 2**31, 2**32 - 1]))
    lie = message[:4] + struct.pack("<I", announced) + message[8:]
    if draw(st.booleans()):
        return Frame(lie[:draw(st.integers(0, len(lie)))], "end")
    return Frame(lie, "lie")


def frames(draw, session: Session, count: int) -> list[Frame]:
    out = []
    for _ in range(count):
        session.live()
        kind = draw(st.sampled_from(["random", "run", "run", "write", "read", "name", "lie"]))
        make = {"random": lambda: random_frame(draw), "run": lambda: run_frame(draw, session),
                "write": lambda: write_frame(draw, session), "read": lambda: read_frame(draw, session),
                "name": lambda: name_frame(draw, session), "lie": lambda: lying_frame(draw, session)}[kind]
        frame = make()
        session.send(frame)
        out.append(frame)
    return out


def fuzz_server(mode: str, directory: str, examples: int, frames_per_example: int, derandomize: bool,
                stats: Stats, poke: bytes | None = None) -> Stats:
    """Runs the server properties for `examples` hypothesis examples; the counts go to `stats`."""
    session = Session(mode, directory, poke or poke_so(), stats)

    @settings(max_examples=examples, derandomize=derandomize, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def run(data):
        frames(data.draw, session, frames_per_example)
        session.check_arena()

    try:
        run()
    finally:
        session.close()
    return stats


@needs_qemu
@pytest.mark.parametrize("mode", ["qemu", "stream"])
def test_the_server_survives_hostile_frames(mode, tmp_path):
    stats = fuzz_server(mode, str(tmp_path), examples=6, frames_per_example=12, derandomize=True, stats=Stats())
    assert stats.crashes == 0 and stats.hangs == 0 and not stats.wrong, (stats.line(), stats.wrong[:5])
    assert stats.error_replies > 10 and stats.ok_replies > 5, stats.line()


# -- the host's readers against fake servers -----------------------------------------------------------------

HOST_TIMEOUT = 0.2
HOST_ERRORS = (protocol.ServerError, DeviceAssertionError, protocol.ChannelClosed, protocol.ChannelTimeout)


@st.composite
def replies(draw):
    """Reply bytes a broken or hostile server might send, and whether it then closes its end."""
    status = draw(st.sampled_from([0, 1, 2, 3, -1, 4, 2**31 - 1]))
    length = draw(st.sampled_from([0, 4, 20, 4096, 4097, 1 << 20, 2**31, 2**32 - 1]) | st.integers(0, 64))
    body = draw(st.binary(max_size=64))
    reply = struct.pack("<iI", status, length) + body
    return reply[:draw(st.integers(0, len(reply)))], draw(st.booleans())


def _feed(fd: int, data: bytes, close: bool) -> None:
    try:
        os.write(fd, data)
    finally:
        if close:
            os.close(fd)


def _bounded(call, timeout: float):
    """Runs `call`, checking that it ends within `timeout` (plus slack) and allocates little."""
    tracemalloc.start()
    started = time.monotonic()
    try:
        return call()
    finally:
        spent = time.monotonic() - started
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert spent < timeout + 2.0, f"{spent:.1f} s"
        assert peak < 8 << 20, f"{peak} bytes allocated"


@settings(max_examples=40, derandomize=True, deadline=None, database=None)
@given(replies(), st.sampled_from([protocol.CMD_PING, protocol.CMD_LOAD, protocol.CMD_RUN_PROFILED]))
def test_the_channel_refuses_malformed_replies(reply, command):
    data, close = reply
    request_r, request_w = os.pipe()
    reply_r, reply_w = os.pipe()
    channel = protocol.Channel(reply_r, request_w)
    message = protocol.frame(command, b"")
    try:
        _feed(reply_w, data, close)
        try:
            body = _bounded(lambda: channel.send(message, HOST_TIMEOUT), HOST_TIMEOUT)
        except HOST_ERRORS:
            return
        assert len(body) <= protocol.reply_limit(message)
        assert len(data) >= 8 + len(body)
    finally:
        for fd in (request_r, request_w, reply_r) + (() if close else (reply_w,)):
            os.close(fd)


def test_the_channel_cuts_off_a_reply_longer_than_its_request():
    request_r, request_w = os.pipe()
    reply_r, reply_w = os.pipe()
    channel = protocol.Channel(reply_r, request_w)
    os.write(reply_w, struct.pack("<iI", 0, 2**32 - 1))
    with pytest.raises(protocol.ChannelBroken, match="4294967295 bytes to a request that gets at most 4096"):
        _bounded(lambda: channel.send(protocol.frame(protocol.CMD_PING, b""), 5.0), 5.0)
    assert os.read(request_r, 100) == protocol.frame(protocol.CMD_PING, b"")
    assert os.read(request_r, 100) == b""   # the server's requests end: it exits
    with pytest.raises(BrokenPipeError):
        os.write(reply_w, b"x")               # nobody reads its replies any more
    for fd in (request_r, request_w, reply_r, reply_w):
        os.close(fd)


def test_the_timeout_bounds_the_whole_reply():
    request_r, request_w = os.pipe()
    reply_r, reply_w = os.pipe()
    channel = protocol.Channel(reply_r, request_w)
    stop = threading.Event()

    def dribble():   # a byte each 0.1 s: every single read is quick, the reply never whole
        os.write(reply_w, struct.pack("<iI", 1, 1000))
        while not stop.wait(0.1):
            os.write(reply_w, b"x")

    thread = threading.Thread(target=dribble)
    thread.start()
    started = time.monotonic()
    try:
        with pytest.raises(protocol.ChannelTimeout):
            channel.send(protocol.frame(protocol.CMD_PING, b""), 1.0)
        assert time.monotonic() - started < 2.0
    finally:
        stop.set()
        thread.join()
        for fd in (request_r, request_w, reply_r, reply_w):
            os.close(fd)


FAKE_BOARD = "import sys, time; sys.stdout.buffer.write(open(sys.argv[1], 'rb').read()); sys.stdout.flush(); " \
             "time.sleep(30) if sys.argv[2] == '1' else None"


def fake_board(tmp_path, data: bytes, stay: bool) -> RemoteServer:
    """A RemoteServer whose board sends `data` and then stays connected (or leaves)."""
    path = tmp_path / "reply.bin"
    path.write_bytes(data)
    script = tmp_path / "board.py"
    script.write_text(FAKE_BOARD)
    server = RemoteServer.__new__(RemoteServer)
    server.link = RemoteLink(f"{sys.executable} {script} {path} {int(stay)}")
    server.present = set()
    return server


@settings(max_examples=20, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(replies(), st.sampled_from(["reply", "profiled", "range"]))
def test_remote_readers_refuse_malformed_replies(tmp_path, reply, reader):
    data, close = reply
    server = fake_board(tmp_path, data, stay=not close)
    target = bytearray(64)
    address = (ctypesc := __import__("ctypes")).addressof((ctypesc.c_char * 64).from_buffer(target))
    calls = {"reply": lambda: server.checked(*server.reply(HOST_TIMEOUT)),
             "profiled": lambda: server.checked(*server.reply(HOST_TIMEOUT, limit=protocol.MAX_PROFILE_REPLY)),
             "range": lambda: server.receive_range(address, 16, HOST_TIMEOUT)}
    try:
        _bounded(calls[reader], HOST_TIMEOUT)
    except (RemoteConnectionLost, KernelFault, protocol.ServerError, DeviceAssertionError) as error:
        if isinstance(error, (RemoteConnectionLost, KernelFault)):
            assert not server.alive()   # closed with the error that says why
    finally:
        server.close()
