"""Linking ahead-of-time kernels into one self-contained shared library: each kernel's object (its entry
point renamed after its C function, so several share a library), a C wrapper per kernel and Spine's grid
runtime (cpp/grid.c and what it needs), built by zig's clang for the kernels' target. Only the kernels'
C functions are exported, so several such libraries also load into one program side by side; a library
needs libc, libm and pthreads, nothing of Python or Spine."""
from __future__ import annotations

import os
import subprocess
import tempfile
from dataclasses import dataclass

from ..driver.toolchain import CPP_DIR, GUEST_ZIG_TARGET, SHARED_SOURCES
from ..zig import zig
from .c_names import check_function_names, check_library_name
from .compile import CompiledObject
from .header import entry_symbol, exported_symbols, header_text, wrapper_source

ZIG_TARGETS = {"riscv64": GUEST_ZIG_TARGET, "host": None}


@dataclass(frozen=True)
class AotLibrary:
    library: str   # path of lib<name>.so
    header: str    # path of <name>.h


def build_library(kernels: list[tuple[CompiledObject, str]], library_name: str, out_dir: str) -> AotLibrary:
    """`kernels`: each compiled kernel with the name of its C function."""
    names = [name for _, name in kernels]
    check_function_names(names)
    check_library_name(library_name)
    _check_distinct_symbols(names)
    targets = {kernel.target for kernel, _ in kernels}
    if len(targets) != 1:
        raise ValueError(f"the kernels of one library are compiled for one target, not {sorted(targets)}")
    os.makedirs(out_dir, exist_ok=True)
    header = os.path.join(out_dir, f"{library_name}.h")
    library = os.path.join(out_dir, f"lib{library_name}.so")
    with open(header, "w") as f:
        f.write(header_text(kernels, library_name))
    with tempfile.TemporaryDirectory(prefix="spine-aot-") as tmp:
        inputs = []
        for kernel, name in kernels:
            wrapper = wrapper_source(kernel, name, os.path.basename(header))
            inputs += [_renamed_object(kernel, name, tmp), _write(tmp, f"{name}_wrapper.c", wrapper)]
        exports = _write(tmp, "exports.map", _version_script([name for _, name in kernels]))
        target = ZIG_TARGETS[targets.pop()]
        zig("cc", *(["-target", target] if target else []), "-shared", "-fPIC", "-O2", "-s",
            "-I", out_dir, "-I", CPP_DIR, *inputs, *(os.path.join(CPP_DIR, s) for s in SHARED_SOURCES),
            f"-Wl,--version-script={exports}", "-lm", "-lpthread", "-ldl", "-o", library)
    return AotLibrary(library, header)


def _check_distinct_symbols(names: list[str]) -> None:
    """Each kernel brings several symbols (`a`, `a_last_error`...): no two of a library's may be one."""
    owner = {}
    for name in names:
        for symbol in (*exported_symbols(name), entry_symbol(name)):
            if symbol in owner:
                raise ValueError(f"kernels {owner[symbol]!r} and {name!r} of one library both define the C "
                                 f"symbol {symbol!r} (use --name)")
            owner[symbol] = name


def _write(directory: str, name: str, data) -> str:
    path = os.path.join(directory, name)
    with open(path, "wb" if isinstance(data, bytes) else "w") as f:
        f.write(data)
    return path


def _renamed_object(kernel: CompiledObject, name: str, directory: str) -> str:
    """The kernel's object with `spine_entry` renamed after its C function (llvm-objcopy of the LLVM
    tools wheel)."""
    import llvm
    objcopy = os.path.join(os.path.dirname(llvm.__file__), "bin", "llvm-objcopy")
    path = _write(directory, f"{name}.o", kernel.object)
    proc = subprocess.run([objcopy, f"--redefine-sym=spine_entry={entry_symbol(name)}", path],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"renaming the entry point of kernel '{kernel.name}' failed:\n{proc.stderr}")
    return path


def _version_script(names: list[str]) -> str:
    symbols = " ".join(f"{s};" for name in names for s in exported_symbols(name))
    return "{\n  global: " + symbols + "\n  local: *;\n};\n"
