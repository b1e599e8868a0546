"""Compile workers: the stages that run native MLIR and LLVM code run in child processes.

The MLIR bindings and llvmlite's LLVM are built with assertions; one failed assertion calls abort() and
would take the user's whole Python process with it. So the conversion, the MLIR lowering and LLVM codegen
run in long-lived worker processes (`python -m spine.compiler.compile_worker`), reused across compiles so a
warm compile pays one pipe round trip, not an interpreter start. A worker that dies mid-request becomes a
`NativeCrash` carrying the stage and what the native code printed before dying; the pool replaces it.

Requests and replies are pickled records over the worker's stdin/stdout, each preceded by its length; a reply
echoes its request's serial number, and a worker whose call was interrupted before its reply was read is
closed, never asked again (its late reply would answer the next request).
Stages meet only through what they send: IR text in, IR text or object bytes (and small records) out.
Several threads may compile at once (Inductor does): each takes its own idle worker, up to one per core.
"""
from __future__ import annotations

import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass

from .. import switches

_HEADER = struct.Struct("<Q")


class NativeCrash(Exception):
    """A compile worker died while running a stage (an LLVM or MLIR assertion, abort, or fatal error)."""

    def __init__(self, stage: str, detail: str):
        super().__init__(f"the {stage} stage crashed in native code: {detail}")
        self.stage = stage
        self.detail = detail


class StageTimeout(Exception):
    def __init__(self, stage: str, seconds: float):
        super().__init__(f"the {stage} stage did not finish within {seconds:.0f} s (SPINE_COMPILE_TIMEOUT)")
        self.stage = stage


@dataclass(frozen=True)
class Request:
    stage: str          # a name in STAGES
    kwargs: dict
    serial: int = 0     # echoed in the reply: a reply to an earlier request is never taken for this one


class WorkerOutOfStep(Exception):
    """A worker answered another request than the one asked (one left from an interrupted call)."""


# ------------------------------------------------------------------------------------------ worker side
def _run_linalg(generic_ttir: str, direct_loads: bool, bounds_check: bool):
    from ..to_linalg import convert_ttir
    return convert_ttir(generic_ttir, direct_loads=direct_loads, bounds_check=bounds_check)


def _run_lower(linalg_text: str, choices, dump_dir: str = "", kernel: str = ""):
    from .lower import lower_with_record
    from .passes import directory_dump
    dump = directory_dump(dump_dir, kernel, ".mlir") if dump_dir else None
    return lower_with_record(linalg_text, choices, dump)


def _run_optimize(llvm_ir: str, entry_ir: str, triple: str, cpu: str, features: str, loop_vectorize: bool,
                  want_assembly: bool = False, dump_dir: str = "", kernel: str = "",
                  bf16: bool = False):
    from .codegen import optimize
    from .passes import directory_dump
    dump = None
    if dump_dir:   # the LLVM passes' dumps: <kernel>.llvm.<NN>-<pass>.ll, and the module they start from
        from ..cache import atomic_write_bytes
        atomic_write_bytes(os.path.join(dump_dir, f"{kernel}.llvm.input.ll"), llvm_ir.encode())
        dump = directory_dump(dump_dir, f"{kernel}.llvm", ".ll")
    return optimize(llvm_ir, entry_ir, triple, cpu, features, loop_vectorize, want_assembly, dump,
                    bf16)


def _run_obj(optimized_ir: str, triple: str, cpu: str, features: str, want_assembly: bool):
    from .codegen import emit
    return emit(optimized_ir, triple, cpu, features, want_assembly)


def _run_selftest(action: str):
    """Misbehave the ways native code can, so the parent's handling of each is testable: "abort",
    "exit:<status>", "sleep:<seconds>", "pid" (answers the worker's process id)."""
    import time
    verb, _, arg = action.partition(":")
    if verb == "abort":
        print("selftest: aborting", file=sys.stderr, flush=True)
        os.abort()
    if verb == "exit":
        os._exit(int(arg))
    if verb == "sleep":
        time.sleep(float(arg))
    return os.getpid()


STAGES = {"linalg": _run_linalg, "lower": _run_lower, "optimize": _run_optimize, "obj": _run_obj,
          "selftest": _run_selftest}


def _read_message(stream):
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        return None
    return pickle.loads(stream.read(_HEADER.unpack(header)[0]))


def _write_message(stream, obj) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def serve() -> None:
    """The worker's loop: one request at a time until stdin closes (the parent exited or let it go)."""
    # The protocol owns the original stdout; anything the stages print goes to stderr instead.
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    requests = sys.stdin.buffer
    while True:
        request = _read_message(requests)
        if request is None:
            return
        try:
            reply = ("ok", STAGES[request.stage](**request.kwargs))
        except BaseException as err:  # noqa: BLE001 (every failure goes back to the caller)
            reply = ("error", _portable(err))
        _write_message(replies, (request.serial,) + reply)


def _portable(err: BaseException) -> BaseException:
    """The exception itself when it pickles (SpineCompilationError does), else a RuntimeError with its text."""
    try:
        pickle.loads(pickle.dumps(err))
        return err
    except Exception:  # noqa: BLE001
        return RuntimeError(f"{type(err).__name__}: {err}")


# ------------------------------------------------------------------------------------------ parent side
class CompileWorker:
    """One child process and the file that collects its stderr (where LLVM prints before it aborts)."""

    def __init__(self):
        # Append mode: the child's writes land at the end even after we truncate the file between requests.
        self.stderr = tempfile.TemporaryFile(mode="a+b")
        self.serial = 0
        # False from a request's start until its reply was read whole: a worker interrupted in between
        # (Ctrl-C, a timeout, any exception in the wait) still owes that reply, and must not serve again.
        self.in_step = True
        env = dict(os.environ, PYTHONFAULTHANDLER="")
        self.proc = subprocess.Popen([sys.executable, "-m", "spine.compiler.compile_worker"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, env=env,
                                     cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

    def call(self, stage: str, kwargs: dict, timeout: float | None):
        self.stderr.seek(0)
        self.stderr.truncate()
        self.serial += 1
        request = Request(stage, kwargs, self.serial)
        self.in_step = False
        try:
            _write_message(self.proc.stdin, request)
        except (BrokenPipeError, OSError):
            pass  # the reply read below reports the dead worker
        serial, status, value = self._read_reply(stage, timeout)
        if serial != request.serial:
            self.close()
            raise WorkerOutOfStep(f"the compile worker answered request {serial} for request {request.serial} "
                                  f"({stage}); it was stopped")
        self.in_step = True
        if status == "error":
            raise value
        return value

    def _read_reply(self, stage: str, timeout: float | None):
        out = self.proc.stdout
        if timeout and not select.select([out], [], [], timeout)[0]:
            self.close()
            raise StageTimeout(stage, timeout)
        try:
            reply = _read_message(out)
        except (EOFError, pickle.UnpicklingError, OSError):
            reply = None
        if reply is None:
            raise NativeCrash(stage, self._death_detail())
        return reply

    def _death_detail(self) -> str:
        code = self.proc.wait()
        self.stderr.seek(0)
        lines = [ln for ln in self.stderr.read().decode(errors="replace").splitlines() if ln.strip()]
        how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit status {code}"
        message = "\n".join(lines[-12:]) if lines else "(nothing printed)"
        return f"{how}\n{message}"

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout, self.stderr):
            try:
                stream.close()
            except OSError:
                pass


class _Claim:
    """One caller's hold on the pool: a place among its `limit` workers, and the worker in it once there is
    one. Made before anything is counted, so whatever the pool counts for a caller is recorded here first;
    if the caller is interrupted before it gives the claim back, dropping the claim gives it back."""

    worker: CompileWorker | None = None
    placed = False   # one of the pool's `count` is this claim's (class defaults: set before __init__ runs)

    def __init__(self, pool: CompileWorkerPool):
        self.pool = pool

    def __del__(self):
        if self.placed:
            self.pool._give_back(self)


class CompileWorkerPool:
    """Idle workers wait here; a caller takes one (starting a new one when none is idle and fewer than
    `limit` exist), and gives it back unless it died.

    Ctrl-C can interrupt a caller anywhere, its own bookkeeping included, and a place that is counted but
    never given back would make every later compile wait forever once `limit` of them leaked. So each caller
    holds a `_Claim` made before it takes anything; every change to the count is one statement that also
    records it in the claim; and giving back is idempotent, done by the caller's `finally` or, when an
    interrupt cut that short, by the claim when it is dropped. The lock is a plain RLock entered directly:
    `threading.Condition.__enter__` is Python code that an interrupt can leave holding the lock."""

    def __init__(self, limit: int):
        self.pid = os.getpid()
        self.limit = max(1, limit)
        self.idle: list[CompileWorker] = []
        self.count = 0   # workers idle, lent or being started
        self.lock = threading.RLock()   # re-entrant: a claim dropped inside the pool's own code gives back
        self.freed = threading.Condition(self.lock)

    def prestart(self) -> None:
        """Start a worker now so its imports overlap with the caller's own work (triton's frontend)."""
        claim = _Claim(self)
        with self.lock:
            if self.count:
                return
            self.count, claim.placed = self.count + 1, True
        claim.worker = CompileWorker()
        self._give_back(claim)

    def _take(self, claim: _Claim) -> CompileWorker:
        """Fills `claim` with an idle worker or a new one, waiting while `limit` are lent."""
        while True:
            with self.lock:
                while not self.idle and self.count >= self.limit:
                    self.freed.wait(1.0)   # a timeout: an interrupt inside notify() can lose one wake-up
                if self.idle:
                    claim.worker, claim.placed = self.idle[-1], True
                    del self.idle[-1]
                else:
                    self.count, claim.placed = self.count + 1, True
            if claim.worker is None:
                claim.worker = CompileWorker()
                return claim.worker
            if claim.worker.alive():
                return claim.worker
            self._give_back(claim)   # it died while idle: its place is freed, and the loop takes another

    def _give_back(self, claim: _Claim) -> None:
        """Lists `claim`'s worker as idle if it can serve again; otherwise frees its place and closes it.
        Safe to call twice: the second call finds nothing placed."""
        with self.lock:
            if not claim.placed:
                return
            worker = claim.worker
            if worker is not None and worker in self.idle:   # interrupted between taking and unlisting it
                claim.placed, claim.worker, worker = False, None, None
            elif worker is not None and worker.in_step and worker.proc.returncode is None:
                self.idle.append(worker)
                claim.placed, claim.worker, worker = False, None, None
            else:   # dead, owing a reply, or never started
                self.count, claim.placed, claim.worker = self.count - 1, False, None
            self.freed.notify()
        if worker is not None:
            worker.close()

    def run(self, stage: str, **kwargs):
        timeout = switches.COMPILE_TIMEOUT.get() or None
        claim = _Claim(self)
        try:
            return self._take(claim).call(stage, kwargs, timeout)
        finally:
            self._give_back(claim)

    def shutdown(self) -> None:
        with self.lock:
            idle, self.idle, self.count = self.idle, [], self.count - len(self.idle)
        for worker in idle:
            worker.close()


_POOL: CompileWorkerPool | None = None
_POOL_LOCK = threading.Lock()


def pool() -> CompileWorkerPool:
    """The process's pool (created on first use; workers exit when this process closes their stdin)."""
    global _POOL
    with _POOL_LOCK:
        # A forked child (Inductor's compile workers) must not share its parent's workers' pipes.
        if _POOL is None or _POOL.pid != os.getpid():
            import atexit
            _POOL = CompileWorkerPool(os.cpu_count() or 1)
            atexit.register(_POOL.shutdown)
        return _POOL


if __name__ == "__main__":
    serve()
