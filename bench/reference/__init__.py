"""Hand-written references, built with zig's clang for riscv64 (auto-vectorised for RVV) as kernel .so
files with Spine's entry point, so the QEMU server runs them and bench/icount.py counts them like
Spine's own kernels."""
from __future__ import annotations

import os

from spine.zig import zig

HERE = os.path.dirname(os.path.abspath(__file__))
RISCV_CPU = "generic_rv64+m+a+f+d+c+v+zfh+zba+zbb+zbs"


def build_reference(name: str, out_dir: str) -> str:
    out = os.path.join(out_dir, f"reference-{name}.so")
    zig("cc", "-target", "riscv64-linux-gnu", f"-mcpu={RISCV_CPU}", "-O3", "-shared", "-fPIC", "-nostdlib",
        os.path.join(HERE, f"{name}.c"), "-o", out)
    return out


def run_reference(so_path: str, grid, params, values, written):
    """Load a reference kernel into the QEMU server and run it once; returns the loaded kernel."""
    from spine.driver.arguments import Arguments
    from spine.driver.cpu_driver import _executor_for
    from spine.targets import riscv64_target
    kernel = _executor_for(riscv64_target()).load(os.path.basename(so_path), so_path)
    kernel.launch(grid, Arguments(tuple(params), tuple(values), frozenset(written)))
    return kernel
