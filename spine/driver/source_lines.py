"""Naming the source line of a faulting instruction: kernels compiled with debug=True carry DWARF line
tables (compiler/lower.py), and fault reports name the kernel object and the code offset in it."""
from __future__ import annotations

import functools
import os
import re

_WHERE = re.compile(r" in (\S+\.so)\+0x([0-9a-f]+)")


def with_source_line(report: str) -> str:
    """The fault report, with ` at file:line` added when it names a code offset in a kernel that has line
    tables."""
    match = _WHERE.search(report)
    if not match:
        return report
    line = source_line(match.group(1), int(match.group(2), 16))
    return f"{report}, at {line}" if line else report


def source_line(so_path: str, offset: int) -> str | None:
    """`file:line` of the code at `offset` in a shared object, from its DWARF line table (None without one)."""
    for lo, hi, where in _line_rows(so_path):
        if lo <= offset < hi:
            return where
    return None


@functools.lru_cache(maxsize=64)
def _line_rows(so_path: str) -> tuple:
    """(start, end, "file:line") for each run of code attributed to one source line."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile
    try:
        with open(so_path, "rb") as f:
            elf = ELFFile(f)
            if not elf.has_dwarf_info():
                return ()
            dwarf = elf.get_dwarf_info()
            rows = []
            for cu in dwarf.iter_CUs():
                program = dwarf.line_program_for_CU(cu)
                if program is not None:
                    rows += _program_rows(program)
            return tuple(rows)
    except (OSError, ELFError, ValueError, KeyError):
        return ()


def _program_rows(program) -> list:
    header = program.header
    files = header["file_entry"]
    dirs = header["include_directory"]
    base = 0 if header["version"] >= 5 else 1  # DWARF 5 numbers files from 0
    rows, previous = [], None
    for entry in program.get_entries():
        state = entry.state
        if state is None:
            continue
        if previous is not None and state.address > previous.address:
            rows.append((previous.address, state.address, _describe(previous, files, dirs, base)))
        previous = None if state.end_sequence else state
    return rows


def _describe(state, files, dirs, base: int) -> str:
    entry = files[state.file - base]
    name = entry.name.decode(errors="replace")
    if entry.dir_index and entry.dir_index - base < len(dirs) and not os.path.isabs(name):
        name = os.path.join(dirs[entry.dir_index - base].decode(errors="replace"), name)
    elif entry.dir_index == 0 and base == 0 and dirs:
        name = os.path.join(dirs[0].decode(errors="replace"), name)
    return f"{name}:{state.line}"
