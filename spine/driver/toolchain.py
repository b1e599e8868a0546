"""Builds Spine's C runtime (cpp/) with zig's clang, once per source version and target, into the cache
(verified on use: see zig.cached_build)."""
from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig

from ..zig import cached_build, zig

CPP_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "cpp")

# Debian bookworm's riscv64 glibc; the guest runs against /usr/riscv64-linux-gnu (libc6-riscv64-cross).
GUEST_ZIG_TARGET = "riscv64-linux-gnu.2.36"
# Built into both the host runtime and the guest kernel server.
SHARED_SOURCES = ("grid.c", "fault_guard.c", "device_io.c", "profile_buffers.c", "parallel_loops.c",
                  "core_placement.c", "openmp_team.c", "shared_panels.c")
# The kernel server's, for QEMU and for boards.
SERVER_SOURCES = ("kernel_server.c", "matrix_emulation.c") + SHARED_SOURCES


def _sources_hash(names: tuple[str, ...], extra: str) -> str:
    h = hashlib.sha256(extra.encode())
    for name in names + ("grid.h", "device_io.h", "fault_guard.h", "profile_buffers.h", "matrix_emulation.h",
                          "core_placement.h", "openmp_team.h"):
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
    return _build("host-runtime", ("host_runtime.c",) + SHARED_SOURCES, ("-shared", "-fPIC", "-O2", "-lpthread", "-ldl"), ".so")


@functools.lru_cache(maxsize=None)
def guest_kernel_server() -> str:
    # -rdynamic: kernels bind to the server's device print/assert and profile record functions.
    return _build("kernel-server", SERVER_SOURCES,
                  ("-target", GUEST_ZIG_TARGET, "-O2", "-rdynamic", "-lpthread", "-ldl"), "")


@functools.lru_cache(maxsize=None)
def launch_extension() -> str:
    """The host launch fast path (cpp/launch.cpp), a Python extension module for this interpreter, built
    against pybind11's headers with the machine's C++ compiler, as pip builds extensions, or else zig's
    clang++ (which first compiles its own C++ library: minutes on two cores, against seconds)."""
    import pybind11
    flags = ("-shared", "-fPIC", "-O2", "-std=c++17", "-fvisibility=hidden")
    includes = (f"-I{sysconfig.get_paths()['include']}", f"-I{pybind11.get_include()}")
    compiler = _system_cxx()
    # Keyed by the interpreter, pybind11 and compiler versions, not by where they are installed: every
    # checkout's virtual environment shares one build.
    key = flags + (f"{sys.implementation.cache_tag}-{sys.version}", f"pybind11-{pybind11.__version__}",
                   compiler[1] if compiler else "zig")
    if compiler is None:
        return _build("spine-launch", ("launch.cpp",), key, ".so", compile_flags=flags + includes)

    def build(path: str) -> None:
        proc = subprocess.run([compiler[0], *flags, *includes, os.path.join(CPP_DIR, "launch.cpp"), "-o", path],
                              capture_output=True, text=True)
        if proc.returncode:
            raise RuntimeError(f"building the launch extension with {compiler[0]} failed:\n{proc.stderr}")
    return cached_build(f"spine-launch-{_sources_hash(('launch.cpp',), ' '.join(key))}.so", build)


def _system_cxx() -> tuple[str, str] | None:
    """(path, first line of --version) of the C++ compiler Python was built with, or c++/g++ on the PATH."""
    configured = (sysconfig.get_config_var("CXX") or "").split()
    for name in configured[:1] + ["c++", "g++"]:
        path = shutil.which(name)
        if path:
            proc = subprocess.run([path, "--version"], capture_output=True, text=True)
            if proc.returncode == 0:
                return path, proc.stdout.splitlines()[0] if proc.stdout else name
    return None
