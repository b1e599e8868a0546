"""triton's own profiler API on Spine: `proton.start(name, backend="cpu")`, `proton.scope(...)`,
`proton.activate/deactivate`, `proton.finalize()`.

triton 3.6 keeps Proton's sessions in its C++ extension (`triton._C.libproton`), which knows only GPU
profilers: `start(backend="cpu")` fails there with "Unknown profiler". We leave the installed package as
it is and give triton.profiler's modules a stand-in for the extension (`LibprotonRoute`): calls about CPU
sessions are served by session.py, everything else reaches the real extension unchanged.
`_select_backend` answers "cpu" while Spine's driver is active, so `proton.start()` with no backend (and
the `proton` command line) picks the CPU profiler too. install() runs when triton.profiler is imported
(spine/aliases.py follows that import).

A CPU session records every kernel launch (kernel, grid, time, and the scopes of instrumented kernels)
and the host scopes around them; finalize() writes `<name>.hatchet` (data="tree", the default) or
`<name>.chrome_trace` (data="trace"), or the format finalize(output_format=...) names.

spine-triton's examples import the API as `import triton.profiler.proton as proton`. In stock triton that
name is the `proton` command line's module, which has `start` and `finalize` but no `scope`; spine-triton's
patched triton gives it the package's whole API. complete_command_module() does the same when that module
is imported, adding only the names it lacks (the package's own objects, so both spellings are one API).
"""
from __future__ import annotations

import sys
import threading
from dataclasses import dataclass

from . import session as sessions

FIRST_SESSION_ID = 1 << 20   # far from the ids the extension hands out for its own sessions
_SUFFIX = {"tree": ".hatchet", "hatchet": ".hatchet", "trace": ".chrome_trace", "chrome_trace": ".chrome_trace"}


@dataclass(eq=False)
class CPUSession:
    id: int
    session: sessions.Session
    name: str
    data: str


_cpu_sessions: dict[int, CPUSession] = {}
_lock = threading.Lock()


def output_path(name: str, data: str, output_format: str = "") -> str:
    """triton's naming: the session name plus the format's suffix (a name that has one keeps it, unless
    finalize asks for another format)."""
    base = name
    for suffix in (".hatchet", ".chrome_trace", ".json"):
        if name.endswith(suffix):
            if not output_format:
                return name
            base = name[:-len(suffix)]
    return base + _SUFFIX.get(output_format or data, ".hatchet")


def _open(name: str, data: str) -> int:
    with _lock:
        session_id = FIRST_SESSION_ID + len(_cpu_sessions)
        session = sessions.register(sessions.Session(f"proton session '{name}'", active=True))
        _cpu_sessions[session_id] = CPUSession(session_id, session, name, data)
    return session_id


def _close(cpu: CPUSession, output_format: str) -> None:
    from .output import write
    cpu.session.active = False
    sessions.unregister(cpu.session)
    with _lock:
        _cpu_sessions.pop(cpu.id, None)
    if not sessions.disabled():
        write(cpu.session, output_path(cpu.name, cpu.data, output_format))


class LibprotonRoute:
    """Stands in for `triton._C.libproton.proton` inside triton.profiler's modules."""

    def __init__(self, real):
        self._real = real
        self._real_sessions = False    # whether a GPU profiler session was ever started through us

    def __getattr__(self, name):
        return getattr(self._real, name)

    def _forward(self, name: str, *args):
        if self._real_sessions:
            return getattr(self._real, name)(*args)
        return None

    # sessions
    def start(self, name, context, data, backend, mode):
        if backend != "cpu":
            self._real_sessions = True
            return self._real.start(name, context, data, backend, mode)
        return _open(name, data)

    def activate(self, session_id):
        if session_id in _cpu_sessions:
            _cpu_sessions[session_id].session.active = True
        else:
            self._real.activate(session_id)

    def deactivate(self, session_id):
        if session_id in _cpu_sessions:
            _cpu_sessions[session_id].session.active = False
        else:
            self._real.deactivate(session_id)

    def activate_all(self):
        for cpu in list(_cpu_sessions.values()):
            cpu.session.active = True
        self._forward("activate_all")

    def deactivate_all(self):
        for cpu in list(_cpu_sessions.values()):
            cpu.session.active = False
        self._forward("deactivate_all")

    def finalize(self, session_id, output_format=""):
        if session_id in _cpu_sessions:
            _close(_cpu_sessions[session_id], output_format)
        else:
            self._real.finalize(session_id, output_format)

    def finalize_all(self, output_format=""):
        for cpu in list(_cpu_sessions.values()):
            _close(cpu, output_format)
        self._forward("finalize_all", output_format)

    def get_context_depth(self, session_id):
        if session_id in _cpu_sessions or not self._real_sessions:
            return len(sessions.host_scope_path())
        return self._real.get_context_depth(session_id)

    # scopes around launches
    def enter_scope(self, scope_id, name):
        sessions.enter_host_scope(name, scope_id)
        self._forward("enter_scope", scope_id, name)

    def exit_scope(self, scope_id, name):
        sessions.exit_host_scope(name, scope_id)
        self._forward("exit_scope", scope_id, name)

    def add_metrics(self, scope_id, metrics, *args):
        sessions.add_host_metrics(dict(metrics), scope_id)
        self._forward("add_metrics", scope_id, metrics, *args)

    # triton's launch hook (hook="triton"): CPU sessions get launches from the runtime itself
    def enter_op(self, *args):
        self._forward("enter_op", *args)

    def exit_op(self, *args):
        self._forward("exit_op", *args)

    def enter_state(self, *args):
        self._forward("enter_state", *args)

    def exit_state(self, *args):
        self._forward("exit_state", *args)


def _cpu_aware(select_backend):
    def select() -> str:
        import triton
        if triton.runtime.driver.active.get_current_target().backend == "cpu":
            return "cpu"
        return select_backend()
    select.__wrapped__ = select_backend
    return select


def install() -> None:
    """Routes every triton.profiler module's `libproton` through one LibprotonRoute (idempotent)."""
    from triton._C.libproton import proton as real
    profile = sys.modules["triton.profiler.profile"]  # (the package's `profile` attribute is a function)
    modules = [m for name, m in list(sys.modules.items()) if name.startswith("triton.profiler") and m is not None]
    held = [vars(m).get("libproton") for m in modules]
    route = next((h for h in held if isinstance(h, LibprotonRoute)), None) or LibprotonRoute(real)
    for module, holds in zip(modules, held):
        if holds is real:
            module.libproton = route
    if not hasattr(profile._select_backend, "__wrapped__"):
        profile._select_backend = _cpu_aware(profile._select_backend)


# The package-level API (triton/profiler/__init__.py) that spine-triton's `triton.profiler.proton` offers.
PACKAGE_API = ("scope", "cpu_timed_scope", "enter_scope", "exit_scope", "state", "enter_state", "exit_state",
               "start", "activate", "deactivate", "finalize", "profile", "DEFAULT_PROFILE_NAME", "context",
               "specs", "mode")


def complete_command_module() -> None:
    """Gives `triton.profiler.proton` the names of PACKAGE_API it lacks (idempotent)."""
    package, command = sys.modules["triton.profiler"], sys.modules["triton.profiler.proton"]
    for name in PACKAGE_API:
        if not hasattr(command, name):
            setattr(command, name, getattr(package, name))
