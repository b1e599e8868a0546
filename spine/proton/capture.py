"""PROTON_KERNEL_CAPTURE=1: every kernel launch is recorded, without any code in the program, and the
launches are written when the process exits (to PROTON_OUTPUT, or as a table on stdout).

The switch is read at every launch, so setting or clearing it mid-process takes effect at once; it does
not change compiled code, so it is not part of the compile key and needs no cache wipe.

session.py starts the capture session at the first captured launch; this module stands on the writers
(output.py) and the listeners, never on session.py."""
from __future__ import annotations

import atexit
import threading

from .. import switches
from .listeners import Session, register
from .output import write

_lock = threading.Lock()
_session: Session | None = None


def capture_session() -> Session:
    global _session
    with _lock:
        if _session is None:
            _session = register(Session("kernel capture", capture=True))
            atexit.register(_write_at_exit)
        return _session


def _write_at_exit() -> None:
    if _session is None or not (_session.launches or _session.host_spans) or switches.DISABLE_PROTON.get():
        return
    write(_session)
