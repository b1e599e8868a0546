"""Who listens to kernel launches: a Session keeps the launches and host spans handed to it, and the
process's listeners are one list of them. This module stands below everything that reads a session (the
writers) and everything that hands launches over (session.py), so it imports nothing of proton's but the
records it holds.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

from .. import switches
from .records import HostSpan, Launch

# Records a passive listener keeps before it drops further launches (about 40 bytes each).
PASSIVE_RECORD_LIMIT = 8_000_000


@dataclass(frozen=True)
class LaunchPlan:
    """How one launch is profiled, decided once before it runs (each switch read costs an environment
    lookup, and every launch asks)."""
    deliver: bool     # hand the launch to listeners (False under TRITON_DISABLE_PROTON: records dropped)
    programs: bool    # record every program instance (kernels with scopes, or PROTON_VERBOSE)
    capture: bool     # PROTON_KERNEL_CAPTURE is set


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

    def takes(self, launch: Launch, plan: LaunchPlan) -> bool:
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


# The C++ launcher holds this very list (driver/launcher.py), so it is only ever changed in place.
_sessions: list[Session] = []
_registry_lock = threading.Lock()


def register(session: Session) -> Session:
    with _registry_lock:
        if session not in _sessions:
            _sessions.append(session)
    return session


def unregister(session: Session) -> None:
    with _registry_lock:
        if session in _sessions:
            _sessions.remove(session)
