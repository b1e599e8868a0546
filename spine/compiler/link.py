"""Stage `so`: link the kernel object into a shared object with lld (shipped by the ziglang wheel),
together with the compiler-rt helpers LLVM calls where the target lacks an instruction (half-precision
conversions without F16C, bf16 from f64, 128-bit division)."""
from __future__ import annotations

import functools
import os
import platform
import subprocess
import tempfile

from ..zig import compiler_rt_archive, zig_binary


def _calls_runtime_helpers(obj: bytes) -> bool:
    """Whether the object leaves a compiler-rt helper undefined (they are all named `__...`)."""
    import io
    from elftools.elf.elffile import ELFFile
    symtab = ELFFile(io.BytesIO(obj)).get_section_by_name(".symtab")
    return any(sym["st_shndx"] == "SHN_UNDEF" and sym.name.startswith("__") for sym in symtab.iter_symbols())


@functools.lru_cache(maxsize=None)
def _process_c_libraries() -> tuple[str, ...]:
    """The glibc libc and libm this process runs on (from /proc/self/maps), or none (another C library)."""
    found = {}
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split()[-1]
                if os.path.basename(path) in ("libc.so.6", "libm.so.6"):
                    found.setdefault(os.path.basename(path), path)
    except OSError:
        return ()
    return tuple(found[name] for name in ("libc.so.6", "libm.so.6") if name in found)


def _versioned_c_library(triple: str) -> list[str]:
    """Link inputs that make an x86-64 kernel's C library calls name their symbol versions. An unversioned
    reference binds to the oldest version: memcpy to GLIBC_2.2.5's, a plain SSE2 memmove, instead of
    GLIBC_2.14's, which picks the AVX2/AVX-512 copy for the machine (tile copies took 3 to 4x longer)."""
    if not triple.startswith("x86_64") or platform.machine() != "x86_64":
        return []
    return list(_process_c_libraries())


def link_shared(obj: bytes, triple: str) -> bytes:
    with tempfile.TemporaryDirectory(prefix="spine-link-") as tmp:
        obj_path = os.path.join(tmp, "kernel.o")
        so_path = os.path.join(tmp, "kernel.so")
        with open(obj_path, "wb") as f:
            f.write(obj)
        # Symbols the kernel does not define (libm, malloc) resolve against the loading process. The
        # helpers stay private to the kernel (--exclude-libs), so unused ones are dropped (--gc-sections).
        cmd = [zig_binary(), "ld.lld", "-shared", "--allow-shlib-undefined", "-o", so_path,
               obj_path] + _versioned_c_library(triple)
        if _calls_runtime_helpers(obj):  # reading the archive costs tens of milliseconds: only when needed
            cmd += ["--gc-sections", "--exclude-libs=ALL", compiler_rt_archive(triple.split("-")[0])]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"linking the kernel failed:\n{proc.stderr}")
        with open(so_path, "rb") as f:
            return f.read()
