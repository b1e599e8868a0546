"""Export a triton TTIR module as generic MLIR text that upstream MLIR can parse.

triton's Python API only prints its custom (pretty) syntax, which upstream MLIR cannot read without the
triton dialect. libtriton.so carries MLIR's own printer flags, but the 3.6 wheel does not export them: the
two functions we need are *local* symbols in its ELF symbol table. We find their offsets in that table,
add the library's load address and call them through ctypes to switch `--mlir-print-op-generic` on for the
whole process while we print, and off again.

This is the one fragile seam of the pipeline; it is pinned to the triton version in pyproject.toml and
tested in tests/compiler/test_export.py.
"""
from __future__ import annotations

import ctypes
import functools
import json
import os
import threading

import numpy as np

_SYMBOLS = ("_ZN4mlir27registerAsmPrinterCLOptionsEv", "LLVMParseCommandLineOptions")
_lock = threading.Lock()
_parser = None


def _libtriton_path() -> str:
    import triton
    return os.path.join(os.path.dirname(triton.__file__), "_C", "libtriton.so")


def _symbol_offsets_uncached(path: str) -> dict[str, int]:
    """Read st_value of the wanted symbols from .symtab.

    The table has ~265k entries; pyelftools iterating them takes ~10 s, so we read the section headers
    with pyelftools and the table itself as a numpy record array.
    """
    from elftools.elf.elffile import ELFFile

    with open(path, "rb") as f:
        elf = ELFFile(f)
        symtab = elf.get_section_by_name(".symtab")
        if symtab is None:
            raise RuntimeError(f"{path} has no .symtab: cannot switch MLIR to generic printing")
        strtab = elf.get_section(symtab["sh_link"])
        f.seek(strtab["sh_offset"])
        names = f.read(strtab["sh_size"])
        f.seek(symtab["sh_offset"])
        raw = f.read(symtab["sh_size"])
    entry = np.dtype([("name", "<u4"), ("info", "u1"), ("other", "u1"), ("shndx", "<u2"),
                      ("value", "<u8"), ("size", "<u8")])
    table = np.frombuffer(raw, dtype=entry)
    offsets = {}
    for symbol in _SYMBOLS:
        needle = b"\0" + symbol.encode() + b"\0"
        at = names.find(needle)
        if at < 0:
            raise RuntimeError(f"symbol {symbol} not found in {path}")
        hits = np.nonzero(table["name"] == at + 1)[0]
        values = [int(table["value"][i]) for i in hits if table["value"][i]]
        if not values:
            raise RuntimeError(f"symbol {symbol} has no address in {path}")
        offsets[symbol] = values[0]
    return offsets


@functools.lru_cache(maxsize=None)
def _symbol_offsets(path: str) -> dict[str, int]:
    from ..cache import cache_dir, atomic_write_text
    st = os.stat(path)
    memo = os.path.join(cache_dir(), "symbols", f"libtriton-{st.st_size}-{int(st.st_mtime)}-v2.json")
    try:
        with open(memo) as f:
            record = json.load(f)
        # Calling a wrong address would crash the process: use the memo only if it is intact.
        if record["check"] == _offsets_check(record["offsets"]):
            return record["offsets"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    offsets = _symbol_offsets_uncached(path)
    atomic_write_text(memo, json.dumps({"offsets": offsets, "check": _offsets_check(offsets)}))
    return offsets


def _offsets_check(offsets) -> str:
    import hashlib
    if sorted(offsets) != sorted(_SYMBOLS) or not all(isinstance(v, int) and v > 0 for v in offsets.values()):
        return ""
    return hashlib.sha256(json.dumps(offsets, sort_keys=True).encode()).hexdigest()


def _load_base(path: str) -> int:
    real = os.path.realpath(path)
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and os.path.realpath(parts[5]) == real and int(parts[2], 16) == 0:
                return int(parts[0].split("-")[0], 16)
    raise RuntimeError(f"{path} is not mapped into this process")


def _command_line_parser():
    """libtriton's LLVM command-line parser, with MLIR's printer options registered (once per process)."""
    global _parser
    if _parser is None:
        import triton._C.libtriton  # noqa: F401  (maps the library)
        path = _libtriton_path()
        offsets = _symbol_offsets(path)
        base = _load_base(path)
        register = ctypes.CFUNCTYPE(None)(base + offsets[_SYMBOLS[0]])
        parse = ctypes.CFUNCTYPE(ctypes.c_bool, ctypes.c_int, ctypes.POINTER(ctypes.c_char_p),
                                 ctypes.c_char_p)(base + offsets[_SYMBOLS[1]])
        register()
        _parser = parse
    return _parser


def _set_generic_printing(on: bool) -> None:
    argv = (ctypes.c_char_p * 2)(b"spine", b"--mlir-print-op-generic=" + (b"true" if on else b"false"))
    _command_line_parser()(2, argv, None)


def export_generic(ttir_module) -> str:
    """Return the TTIR module as generic MLIR text, locations included (errors name source lines).

    The switch is process-wide, so it is on only while this prints: triton's own text of the module
    (a compiled kernel's asm["ttir"]) keeps triton's syntax."""
    with _lock:
        _set_generic_printing(True)
        try:
            return ttir_module.str()
        finally:
            _set_generic_printing(False)
