"""Stage `so`: link the kernel object into a shared object with lld (shipped by the ziglang wheel)."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile


def link_shared(obj: bytes) -> bytes:
    with tempfile.TemporaryDirectory(prefix="spine-link-") as tmp:
        obj_path = os.path.join(tmp, "kernel.o")
        so_path = os.path.join(tmp, "kernel.so")
        with open(obj_path, "wb") as f:
            f.write(obj)
        # Symbols the kernel does not define (libm, malloc) resolve against the loading process.
        cmd = [sys.executable, "-m", "ziglang", "ld.lld", "-shared", "--allow-shlib-undefined", "-o", so_path,
               obj_path]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"linking the kernel failed:\n{proc.stderr}")
        with open(so_path, "rb") as f:
            return f.read()
