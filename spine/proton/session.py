"""Profiling sessions: kernel launches and host scopes handed to whoever listens.

A Session (listeners.py) collects Launch records (from the executors, driver/native.py and
driver/qemu.py) and HostSpans (proton.scope around launches). Three kinds listen:
  - sessions started through the APIs (`profiler.start()`, `proton.start(backend="cpu")`),
  - the process-wide capture session while PROTON_KERNEL_CAPTURE=1 (capture.py),
  - spine-triton's `profiler`, which keeps the launches of instrumented kernels even when not started.
TRITON_DISABLE_PROTON=1 silences all of them. The executors and the APIs reach the listeners through
this module, which stands on capture.py so that the first captured launch can start the capture session.
"""
from __future__ import annotations

import threading
import time

from .. import switches
from .capture import capture_session
# Session, register and the list itself are imported from here by the APIs and driver/launcher.py.
from .listeners import PASSIVE_RECORD_LIMIT, LaunchPlan, Session, _sessions, register, unregister  # noqa: F401
from .records import HostSpan, Launch

_host = threading.local()      # .stack: the open host scopes of this thread, [(name, start_ns)]


def disabled() -> bool:
    return switches.DISABLE_PROTON.get()


_DRAIN_ONLY = LaunchPlan(deliver=False, programs=True, capture=False)


def plan_launch(instrumented: bool) -> LaunchPlan | None:
    """None: run the launch plain. A kernel with scopes always runs profiled, listened to or not, so its
    records are taken out of the runtime's buffers."""
    capture = switches.KERNEL_CAPTURE.get()
    if not (instrumented or capture or any(s.active for s in _sessions)):
        return None  # the common case: one switch read
    if disabled():
        return _DRAIN_ONLY if instrumented else None
    return LaunchPlan(True, instrumented or switches.PROTON_VERBOSE.get(), capture)


def record_launch(launch: Launch, plan: LaunchPlan) -> None:
    if not plan.deliver:
        return
    if plan.capture:
        capture_session()
    launch.host_scopes = host_scope_path()
    launch.host_thread = threading.get_ident()
    for session in list(_sessions):
        if session.takes(launch, plan):
            session.add(launch)


# ----------------------------------------------------------------------------------------- host scopes

def _stack() -> list:
    if not hasattr(_host, "stack"):
        _host.stack = []
    return _host.stack


def host_scope_path() -> tuple[str, ...]:
    return tuple(entry[0] for entry in getattr(_host, "stack", ()))


def enter_host_scope(name: str, scope_id: int | None = None) -> None:
    _stack().append((name, time.monotonic_ns(), scope_id))


def exit_host_scope(name: str | None = None, scope_id: int | None = None) -> None:
    stack = _stack()
    if not stack:
        return
    path = host_scope_path()
    opened, start, _ = stack.pop()
    if name is not None and name != opened:
        raise ValueError(f"host scope '{name}' closed while '{opened}' is the innermost open scope")
    # triton adds a scope's exit metrics right after closing it, by id
    _host.last_closed = (scope_id, path)
    if disabled():
        return
    span = HostSpan(opened, path, threading.get_ident(), start, time.monotonic_ns())
    for session in list(_sessions):
        if session.listening():
            session.add_span(span)


def _path_of(scope_id: int | None) -> tuple[str, ...]:
    for entry_index, entry in enumerate(reversed(getattr(_host, "stack", ()))):
        if scope_id is None or entry[2] == scope_id:
            return host_scope_path()[:len(_stack()) - entry_index]
    closed_id, closed_path = getattr(_host, "last_closed", (None, ()))
    return closed_path if closed_id == scope_id else ()


def add_host_metrics(metrics: dict, scope_id: int | None = None) -> None:
    """User metrics for a host scope (proton.scope(name, metrics)), summed per scope path."""
    path = _path_of(scope_id)
    if not path or not metrics or disabled():
        return
    for session in list(_sessions):
        if session.listening():
            with session.lock:
                totals = session.host_metrics.setdefault(path, {})
                for key, value in metrics.items():
                    totals[key] = totals.get(key, 0) + value
