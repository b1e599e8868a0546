"""Builds Spine's C runtime (cpp/) with zig's clang, once per source version and target, into the cache
(verified on use: see zig.cached_build)."""
from __future__ import annotations

import functools
import hashlib
import os
import sys
import sysconfig

from ..zig import cached_build, zig

CPP_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "cpp")

# Debian bookworm's riscv64 glibc; the guest runs against /usr/riscv64-linux-gnu (libc6-riscv64-cross).
GUEST_ZIG_TARGET = "riscv64-linux-gnu.2.36"
# Built into both the host runtime and the guest kernel server.
SHARED_SOURCES = ("grid.c", "fault_guard.c", "device_io.c", "profile_buffers.c")


def _sources_hash(names: tuple[str, ...], extra: str) -> str:
    h = hashlib.sha256(extra.encode())
    for name in names + ("grid.h", "device_io.h", "fault_guard.h", "profile_buffers.h"):
        with open(os.path.join(CPP_DIR, name), "rb") as f:
            h.update(f.read())
    return h.hexdigest()[:16]


def _build(kind: str, sources: tuple[str, ...], flags: tuple[str, ...], suffix: str,
           compile_flags: tuple[str, ...] | None = None) -> str:
    """`flags` key the build; `compile_flags` (default: the same) are what the compiler is given."""
    language = "c++" if sources[0].endswith(".cpp") else "cc"

    def build(path: str) -> None:
        zig(language, *(flags if compile_flags is None else compile_flags),
            *(os.path.join(CPP_DIR, s) for s in sources), "-o", path)
    return cached_build(f"{kind}-{_sources_hash(sources, ' '.join(flags))}{suffix}", build)


@functools.lru_cache(maxsize=None)
def host_runtime_library() -> str:
    return _build("host-runtime", ("host_runtime.c",) + SHARED_SOURCES, ("-shared", "-fPIC", "-O2", "-lpthread"), ".so")


@functools.lru_cache(maxsize=None)
def guest_kernel_server() -> str:
    # -rdynamic: kernels bind to the server's device print/assert and profile record functions.
    return _build("kernel-server", ("kernel_server.c",) + SHARED_SOURCES,
                  ("-target", GUEST_ZIG_TARGET, "-O2", "-rdynamic", "-lpthread", "-ldl"), "")


@functools.lru_cache(maxsize=None)
def launch_extension() -> str:
    """The host launch fast path (cpp/launch.cpp), a Python extension module for this interpreter, built
    with zig's clang++ against pybind11's headers."""
    import pybind11
    flags = ("-shared", "-fPIC", "-O2", "-std=c++17", "-fvisibility=hidden")
    includes = (f"-I{sysconfig.get_paths()['include']}", f"-I{pybind11.get_include()}")
    # Keyed by the interpreter and pybind11 versions, not by where they are installed: every checkout's
    # virtual environment shares one build.
    key = flags + (f"{sys.implementation.cache_tag}-{sys.version}", f"pybind11-{pybind11.__version__}")
    return _build("spine-launch", ("launch.cpp",), key, ".so", compile_flags=flags + includes)
