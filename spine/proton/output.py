"""Where a session goes: the file's extension chooses the format, as spine-triton's PROTON_OUTPUT does.

    .json, .chrome_trace   Chrome trace (trace.py), for Perfetto
    .hatchet               scope tree (tree.py), for hatchet and `python -m spine.proton.viewer`
    anything else          the table (table.py), as text
    no file                the table on stdout
"""
from __future__ import annotations

import os

from .. import switches
from .listeners import Session

TRACE_SUFFIXES = (".json", ".chrome_trace")
TREE_SUFFIXES = (".hatchet",)


def output_format(path: str) -> str:
    lower = path.lower()
    if lower.endswith(TRACE_SUFFIXES):
        return "trace"
    if lower.endswith(TREE_SUFFIXES):
        return "hatchet"
    return "table"


def write(session: Session, path: str | None = None) -> str | None:
    """Writes the session to `path` (default PROTON_OUTPUT), or prints its table when there is none.
    Returns the path written."""
    path = path or switches.PROTON_OUTPUT.get()
    if not path:
        from .table import print_table
        print_table(session)
        return None
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    kind = output_format(path)
    if kind == "trace":
        from .trace import write_trace
        write_trace(session, path)
    elif kind == "hatchet":
        from .tree import write_hatchet
        write_hatchet(session, path)
    else:
        from .table import format_table
        with open(path, "w") as f:
            f.write(format_table(session) + "\n")
    return path
