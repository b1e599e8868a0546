"""The byte stream to a board: the command SPINE_REMOTE names (`ssh user@board sh`, or anything that starts
a POSIX shell there), run here with pipes, and the kernel server started through that shell.

Starting: the shell makes a cache directory on the board, says where it is, installs the kernel server there
unless the file named by its content hash is there with that content (base64 in a here-document: no other
tool, and no read-ahead of the stream, is needed; each connection decodes into a file of its own, renamed
into place only once decoded and checked), and `exec`s it in stream mode (cpp/kernel_server.c). From then on the
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

from .kernel_protocol import deadline_after, seconds_left

START_TIMEOUT = 120.0   # seconds to connect, install the server and hear it is ready
FAULT_REPORT = "spine-fault: "  # how cpp/fault_guard.c's report of a fault starts
READ_STEP = 1 << 20   # bytes of a reply stored at a time


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

    def read_line(self, deadline: float | None) -> str:
        """One line of the shell's output, read a byte at a time: nothing after it is consumed, so the
        server's replies that follow are left to the protocol."""
        fd = self.proc.stdout.fileno()
        line = bytearray()
        while not line.endswith(b"\n"):
            self._wait_readable(fd, deadline, "line")
            byte = os.read(fd, 1)
            if not byte:
                raise EOFError("line")
            line += byte
        return line.decode(errors="replace")

    @staticmethod
    def _wait_readable(fd: int, deadline: float | None, what: str) -> None:
        left = seconds_left(deadline)
        if left == 0 or not select.select([fd], [], [], left)[0]:
            raise TimeoutError(what)

    def read_into(self, view: memoryview, deadline: float | None) -> None:
        """Fills `view` from the stream (the server's replies), all of it by `deadline` (time.monotonic)."""
        fd = self.proc.stdout.fileno()
        got = 0
        while got < len(view):
            self._wait_readable(fd, deadline, "reply")
            n = os.readv(fd, [view[got:]])
            if not n:
                raise EOFError("reply")
            got += n

    def read_exact(self, n: int, deadline: float | None) -> bytes:
        """`n` bytes by `deadline`, stored as they arrive: a length that lies costs no memory."""
        out = bytearray()
        while len(out) < n:
            step = bytearray(min(n - len(out), READ_STEP))
            self.read_into(memoryview(step), deadline)
            out += step
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

    def start_server(self, server: bytes, runner: str = "", options: tuple[str, ...] = ()) -> None:
        """Installs `server` on the board unless there already, then replaces the shell by it (through
        `runner`, a command prefix, when the board cannot run it directly), with `options` before its own
        arguments."""
        try:
            self._install_and_exec(server, runner, options)
        except EOFError:
            raise RemoteConnectionLost(self.ended("while the kernel server was being started")) from None

    def _install_and_exec(self, server: bytes, runner: str, options) -> None:
        nonce = secrets.token_hex(6)
        deadline = deadline_after(START_TIMEOUT)
        # The board's cache must be the user's own and not writable by others: whoever could write it could
        # plant a server or kernel under a name we trust (their contents are checked as well). `ls -ld`'s
        # mode string is what a minimal POSIX shell has to tell.
        self.send(b'd="${XDG_CACHE_HOME:-$HOME/.cache}/spine-remote" && mkdir -p -m 700 "$d" && cd "$d" && '
                  + f'case "$(ls -ld .)" in ?????w*|????????w*) echo "spine-unsafe {nonce} $d";; *) '
                    f'if [ -O . ]; then echo "spine-remote {nonce} $(uname -m)"; '
                    f'else echo "spine-unsafe {nonce} $d"; fi;; esac\n'.encode())
        answer = self._expect((f"spine-remote {nonce}", f"spine-unsafe {nonce}"),
                              "the first command (is it a POSIX shell?)", deadline)
        if answer.startswith(f"spine-unsafe {nonce}"):
            where = answer[len(f"spine-unsafe {nonce}"):].strip()
            raise RemoteConnectionLost(
                f"the board's cache directory {where} is not the user's own or is writable by others: refusing "
                f"to run code from it (chmod go-w it, or set XDG_CACHE_HOME on the board; "
                f"SPINE_REMOTE={self.command!r})")
        name = f"kernel-server-{hashlib.sha256(server).hexdigest()[:16]}"
        check = _verified(name, server)
        self.send(f"{check} && echo spine-have-{nonce} || echo spine-need-{nonce}\n".encode())
        answer = self._expect((f"spine-have-{nonce}", f"spine-need-{nonce}"), "the server check", deadline)
        if answer == f"spine-need-{nonce}":
            self.send(_install_script(name, server, nonce).encode())
            done = self._expect((f"spine-installed-{nonce}", f"spine-failed-{nonce}"),
                                "the server's installation", deadline)
            if done != f"spine-installed-{nonce}":
                raise RemoteConnectionLost(
                    f"the kernel server could not be installed on the board (SPINE_REMOTE={self.command!r}): "
                    f"decoding or checking its copy failed (is base64 there? is the disk full?)"
                    + self._last_words())
        self.send(f"exec {runner} ./{name} {shlex.join(options)} --stream .\n".encode())

    def _last_words(self) -> str:
        said = [line for line in self.stderr.lines if line.strip()]
        return f"; it said: {said[-1]}" if said else ""

    def _expect(self, prefix, what: str, deadline: float | None) -> str:
        """The first line of the shell's output that starts with `prefix` (a string or a tuple of them;
        login banners and the like are skipped), by `deadline`."""
        try:
            while True:
                line = self.read_line(deadline).strip()
                if line.startswith(prefix):
                    return line
        except TimeoutError:
            raise RemoteConnectionLost(f"the board's shell did not answer {what} within {START_TIMEOUT:.0f} s "
                                       f"(SPINE_REMOTE={self.command!r})") from None
        except EOFError:
            raise RemoteConnectionLost(self.ended(f"before answering {what}")) from None


def _holds(path: str, content: bytes) -> str:
    """A shell condition: `path` is a file holding `content`. POSIX promises no hashing tool: sha256sum
    (coreutils, busybox) checks the content where the board has it; elsewhere only the size (wc -c, POSIX)
    is checked, which still refuses the empty or cut-short copy a failed install leaves."""
    digest = hashlib.sha256(content).hexdigest()
    return (f'test -f {path} && if command -v sha256sum >/dev/null 2>&1; '
            f'then case "$(sha256sum < {path})" in {digest}*) true;; *) false;; esac; '
            f'else test "$(wc -c < {path} | tr -d " ")" = {len(content)}; fi')


def _verified(path: str, content: bytes) -> str:
    return f"test -x {path} && {_holds(path, content)}"


def _install_script(name: str, server: bytes, nonce: str) -> str:
    """Decodes the server into a file of this connection's own (two first connections do not share one),
    and gives it its name only when decoding succeeded and the copy checks out: a board whose disk is full
    keeps no empty server that later connections would run."""
    part = f".{name}.{nonce}.part"
    encoded = base64.encodebytes(server).decode()
    return (f"base64 -d > {part} <<'SPINE_END' && {_holds(part, server)} && chmod +x {part} && "
            f"mv -f {part} {name} && echo spine-installed-{nonce} || {{ rm -f {part}; echo spine-failed-{nonce}; }}\n"
            f"{encoded}SPINE_END\n")
