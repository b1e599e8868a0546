"""Profiling sessions: who is listening to kernel launches, and the host scopes open around them.

A Session collects Launch records (from the executors, driver/native.py and driver/qemu.py) and
HostSpans (proton.scope around launches). Three kinds listen:
  - sessions started through the APIs (`profiler.start()`, `proton.start(backend="cpu")`),
  - the process-wide capture session while PROTON_KERNEL_CAPTURE=1 (capture.py),
  - spine-triton's `profiler`, which keeps the launches of instrumented kernels even when not started.
TRITON_DISABLE_PROTON=1 silences all of them.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from .. import switches
from .records import HostSpan, Launch

# Records a passive listener keeps before it drops further launches (about 40 bytes each).
PASSIVE_RECORD_LIMIT = 8_000_000


@dataclass(eq=False)
class Session:
    name: str
    active: bool = False                 # listening to every launch and host scope
    keep_scoped: bool = False            # also keep launches that carry kernel scopes while not active
    capture: bool = False                # listening whenever PROTON_KERNEL_CAPTURE is set
    launches: list = field(default_factory=list)
    host_spans: list = field(default_factory=list)
    host_metrics: dict = field(default_factory=dict)  # host scope path → metrics added to it
    dropped_launches: int = 0
    records: int = 0                     # records held, over all launches
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def listening(self) -> bool:
        return self.active or (self.capture and switches.KERNEL_CAPTURE.get())

    def takes(self, launch: Launch, plan: "LaunchPlan") -> bool:
        return self.active or (self.capture and plan.capture) or (self.keep_scoped and launch.header.records > 0)

    def add(self, launch: Launch) -> None:
        with self.lock:
            if not self.active and not self.capture and self.records + launch.header.records > PASSIVE_RECORD_LIMIT:
                self.dropped_launches += 1
                return
            self.launches.append(launch)
            self.records += launch.header.records

    def add_span(self, span: HostSpan) -> None:
        with self.lock:
            self.host_spans.append(span)

    def reset(self) -> None:
        with self.lock:
            self.launches, self.host_spans, self.host_metrics = [], [], {}
            self.dropped_launches = self.records = 0


_sessions: list[Session] = []
_registry_lock = threading.Lock()
_host = threading.local()      # .stack: the open host scopes of this thread, [(name, start_ns)]


def register(session: Session) -> Session:
    with _registry_lock:
        if session not in _sessions:
            _sessions.append(session)
    return session


def unregister(session: Session) -> None:
    with _registry_lock:
        if session in _sessions:
            _sessions.remove(session)


def disabled() -> bool:
    return switches.DISABLE_PROTON.get()


@dataclass(frozen=True)
class LaunchPlan:
    """How one launch is profiled, decided once before it runs (each switch read costs an environment
    lookup, and every launch asks)."""
    deliver: bool     # hand the launch to listeners (False under TRITON_DISABLE_PROTON: records dropped)
    programs: bool    # record every program instance (kernels with scopes, or PROTON_VERBOSE)
    capture: bool     # PROTON_KERNEL_CAPTURE is set


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
        from .capture import capture_session
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
