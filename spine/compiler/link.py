"""Stage `so`: link the kernel object into a shared object with lld (shipped by the ziglang wheel),
together with the compiler-rt helpers LLVM calls where the target lacks an instruction (half-precision
conversions without F16C, bf16 from f64, 128-bit division)."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile

from ..zig import compiler_rt_archive


def link_shared(obj: bytes, triple: str) -> bytes:
    with tempfile.TemporaryDirectory(prefix="spine-link-") as tmp:
        obj_path = os.path.join(tmp, "kernel.o")
        so_path = os.path.join(tmp, "kernel.so")
        with open(obj_path, "wb") as f:
            f.write(obj)
        # Symbols the kernel does not define (libm, malloc) resolve against the loading process. The
        # helpers stay private to the kernel (--exclude-libs), so unused ones are dropped (--gc-sections).
        cmd = [sys.executable, "-m", "ziglang", "ld.lld", "-shared", "--allow-shlib-undefined", "--gc-sections",
               "--exclude-libs=ALL", "-o", so_path, obj_path, compiler_rt_archive(triple.split("-")[0])]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"linking the kernel failed:\n{proc.stderr}")
        with open(so_path, "rb") as f:
            return f.read()
