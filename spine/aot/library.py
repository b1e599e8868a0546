"""Linking an ahead-of-time kernel into a self-contained shared library: the kernel object, its C wrapper
and Spine's grid runtime (cpp/grid.c and what it needs), built by zig's clang for the kernel's target.
Only the kernel's C functions are exported, so several such libraries load into one program side by
side; the library needs libc, libm and pthreads, nothing of Python or Spine."""
from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass

from ..driver.toolchain import CPP_DIR, GUEST_ZIG_TARGET, SHARED_SOURCES
from ..zig import zig
from .compile import CompiledObject
from .header import exported_symbols, header_text, wrapper_source

ZIG_TARGETS = {"riscv64": GUEST_ZIG_TARGET, "host": None}


@dataclass(frozen=True)
class AotLibrary:
    library: str   # path of lib<name>.so
    header: str    # path of <name>.h


def build_library(kernel: CompiledObject, name: str, out_dir: str) -> AotLibrary:
    if not name.isidentifier():
        raise ValueError(f"{name!r} is not a C identifier")
    os.makedirs(out_dir, exist_ok=True)
    header = os.path.join(out_dir, f"{name}.h")
    library = os.path.join(out_dir, f"lib{name}.so")
    with open(header, "w") as f:
        f.write(header_text(kernel, name))
    with tempfile.TemporaryDirectory(prefix="spine-aot-") as tmp:
        paths = {"kernel.o": kernel.object, f"{name}_wrapper.c": wrapper_source(kernel, name).encode(),
                 "exports.map": _version_script(name).encode()}
        for file_name, data in paths.items():
            with open(os.path.join(tmp, file_name), "wb") as f:
                f.write(data)
        target = ZIG_TARGETS[kernel.target]
        zig("cc", *(["-target", target] if target else []), "-shared", "-fPIC", "-O2", "-s",
            "-I", out_dir, "-I", CPP_DIR, os.path.join(tmp, f"{name}_wrapper.c"),
            *(os.path.join(CPP_DIR, s) for s in SHARED_SOURCES), os.path.join(tmp, "kernel.o"),
            f"-Wl,--version-script={os.path.join(tmp, 'exports.map')}", "-lm", "-lpthread",
            "-o", library)
    return AotLibrary(library, header)


def _version_script(name: str) -> str:
    return "{\n  global: " + " ".join(f"{s};" for s in exported_symbols(name)) + "\n  local: *;\n};\n"
