"""The byte stream to a board: the command SPINE_REMOTE names (`ssh user@board sh`, or anything that starts
a POSIX shell there), run here with pipes, and the kernel server started through that shell.

Starting: the shell makes a cache directory on the board, says where it is, installs the kernel server there
if the file named by its content hash is missing (base64 in a here-document: no other tool, and no
read-ahead of the stream, is needed), and `exec`s it in stream mode (cpp/kernel_server.c). From then on the
stream carries the server's protocol; what the board prints on stderr comes back on the command's stderr
and is passed on to ours (kernels' device prints), its last lines kept for error messages."""
from __future__ import annotations

import base64
import collections
import hashlib
import os
import secrets
import select
import shlex
import subprocess
import sys
import threading

START_TIMEOUT = 120.0   # seconds to connect, install the server and hear it is ready
FAULT_REPORT = "spine-fault: "  # how cpp/fault_guard.c's report of a fault starts


class RemoteConnectionLost(ConnectionError):
    """The stream to the board ended, or the board's shell did not answer as expected."""


class _StderrKeeper(threading.Thread):
    """Passes the board's stderr on to ours (all but fault reports) and keeps its last lines."""

    def __init__(self, stream):
        super().__init__(daemon=True)
        self.stream = stream
        self.lines: collections.deque = collections.deque(maxlen=50)

    def run(self):
        for raw in iter(self.stream.readline, b""):
            line = raw.decode(errors="replace").rstrip("\n")
            self.lines.append(line)
            if not line.startswith(FAULT_REPORT):
                try:
                    sys.stderr.write(line + "\n")
                except (OSError, ValueError):
                    pass


class RemoteLink:
    """One connection: the command's process, its stdout read through our own buffer (the shell's lines,
    then the server's replies), its stdin written whole."""

    def __init__(self, command: str):
        self.command = command
        argv = shlex.split(command)
        if not argv:
            raise ValueError("SPINE_REMOTE is empty")
        try:
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, bufsize=0, start_new_session=True)
        except OSError as err:
            raise RemoteConnectionLost(f"SPINE_REMOTE={command!r} could not be started: {err}") from None
        self.stderr = _StderrKeeper(self.proc.stderr)
        self.stderr.start()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, 9)
            except OSError:
                self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        self.stderr.join(timeout=5)

    def send(self, data: bytes) -> None:
        """Writes all of `data` (blocking while the board catches up)."""
        fd = self.proc.stdin.fileno()
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(fd, view):]
        except OSError:
            raise EOFError("sending") from None

    def read_line(self, timeout: float | None) -> str:
        """One line of the shell's output, read a byte at a time: nothing after it is consumed, so the
        server's replies that follow are left to the protocol."""
        fd = self.proc.stdout.fileno()
        line = bytearray()
        while not line.endswith(b"\n"):
            ready, _, _ = select.select([fd], [], [], timeout)
            if not ready:
                raise TimeoutError("line")
            byte = os.read(fd, 1)
            if not byte:
                raise EOFError("line")
            line += byte
        return line.decode(errors="replace")

    def read_into(self, view: memoryview, timeout: float | None) -> None:
        """Fills `view` from the stream (the server's replies), each wait at most `timeout` seconds."""
        fd = self.proc.stdout.fileno()
        got = 0
        while got < len(view):
            ready, _, _ = select.select([fd], [], [], timeout)
            if not ready:
                raise TimeoutError("reply")
            n = os.readv(fd, [view[got:]])
            if not n:
                raise EOFError("reply")
            got += n

    def read_exact(self, n: int, timeout: float | None) -> bytes:
        out = bytearray(n)
        self.read_into(memoryview(out), timeout)
        return bytes(out)

    def ended(self, when: str) -> str:
        """Why the stream ended: the process's status and the board's last words."""
        try:
            code = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            code = None
        self.stderr.join(timeout=5)
        said = [line for line in self.stderr.lines if line.strip()]
        status = "still running" if code is None else (f"killed by signal {-code}" if code < 0 else
                                                        f"exit status {code}")
        return (f"the connection to the board ended {when} (SPINE_REMOTE={self.command!r}, {status})"
                + (f"; it said: {said[-1]}" if said else ""))

    def fault_report(self) -> str | None:
        reports = [line[len(FAULT_REPORT):] for line in self.stderr.lines if line.startswith(FAULT_REPORT)]
        return reports[-1] if reports else None

    # -- starting the server through the shell ------------------------------------------------------------

    def start_server(self, server: bytes, runner: str = "") -> None:
        """Installs `server` on the board unless there already, then replaces the shell by it (through
        `runner`, a command prefix, when the board cannot run it directly)."""
        try:
            self._install_and_exec(server, runner)
        except EOFError:
            raise RemoteConnectionLost(self.ended("while the kernel server was being started")) from None

    def _install_and_exec(self, server: bytes, runner: str) -> None:
        nonce = secrets.token_hex(6)
        self.send(b'd="${XDG_CACHE_HOME:-$HOME/.cache}/spine-remote" && mkdir -p "$d" && cd "$d" && '
                  + f'echo "spine-remote {nonce} $(uname -m)"\n'.encode())
        self._expect(f"spine-remote {nonce}", "the first command (is it a POSIX shell?)")
        name = f"kernel-server-{hashlib.sha256(server).hexdigest()[:16]}"
        self.send(f"test -x {name} && echo spine-have-{nonce} || echo spine-need-{nonce}\n".encode())
        answer = self._expect((f"spine-have-{nonce}", f"spine-need-{nonce}"), "the server check")
        if answer == f"spine-need-{nonce}":
            encoded = base64.encodebytes(server).decode()
            self.send(f"base64 -d > .{name}.part <<'SPINE_END'\n{encoded}SPINE_END\n"
                      f"chmod +x .{name}.part && mv .{name}.part {name} && echo spine-installed-{nonce}\n".encode())
            self._expect(f"spine-installed-{nonce}", "the server's installation (is base64 there?)")
        self.send(f"exec {runner} ./{name} --stream .\n".encode())

    def _expect(self, prefix, what: str) -> str:
        """The first line of the shell's output that starts with `prefix` (a string or a tuple of them;
        login banners and the like are skipped)."""
        try:
            while True:
                line = self.read_line(START_TIMEOUT).strip()
                if line.startswith(prefix):
                    return line
        except TimeoutError:
            raise RemoteConnectionLost(f"the board's shell did not answer {what} within {START_TIMEOUT:.0f} s "
                                       f"(SPINE_REMOTE={self.command!r})") from None
        except EOFError:
            raise RemoteConnectionLost(self.ended(f"before answering {what}")) from None
