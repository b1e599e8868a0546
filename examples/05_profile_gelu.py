"""Profiling a GELU kernel with Proton scopes, as spine-triton documents it, into a Chrome trace.

    python examples/05_profile_gelu.py [trace.json]    # default: PROTON_OUTPUT, else gelu_trace.json
    SPINE_TARGET=host python examples/05_profile_gelu.py

Open the trace in Perfetto (ui.perfetto.dev, "Open trace file"): one track per grid thread, each launch a
slice, the programs the thread ran inside it, and the kernel's scopes inside each program. The process
name says which counter was read: rdtsc on x86-64; rdtime on riscv64, which under QEMU user mode is the
host's clock (time spent emulating), not RISC-V cycles. A `.hatchet` name writes a tree instead, for
`python -m spine.proton.viewer FILE`.
"""
import os
import sys

import torch
import triton
import triton.language as tl
import triton.profiler.language as pl
from triton.language.extra.cpu import libdevice
from triton.profiler.flags import flags
from triton.backends.spine_triton.proton import profiler

from _report import activate, report

# spine-triton's set-up: scopes in kernels written in the Triton DSL, instrumentation on.
pl.enable_semantic("triton")
flags.instrumentation_on = True


@triton.jit
def gelu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    pl.enter_scope("load")
    x = tl.load(x_ptr + offs, mask=mask)
    pl.exit_scope("load")
    pl.enter_scope("gelu")
    y = 0.5 * x * (1.0 + libdevice.erf(x * 0.7071067811865476))
    pl.exit_scope("gelu")
    pl.enter_scope("store")
    tl.store(out_ptr + offs, y, mask=mask)
    pl.exit_scope("store")


def main():
    target = activate()
    path = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("PROTON_OUTPUT") or "gelu_trace.json"
    n = 1 << 18
    x = torch.randn(n)
    out = torch.empty_like(x)
    grid = (triton.cdiv(n, 4096),)
    gelu_kernel[grid](x, out, n, BLOCK=4096)  # compile (or load from the cache) outside the profile
    with profiler.profile(path):
        for _ in range(3):
            gelu_kernel[grid](x, out, n, BLOCK=4096)
    kernel = profiler.get_results()["kernels"][f"gelu_kernel[{grid[0]},1,1]"]
    report("gelu (profiled)", target, out, torch.nn.functional.gelu(x), kernel["avg_ns"] * 1e-9, tol=1e-5)
    shares = ", ".join(f"{name} {scope['share']:.0%}" for name, scope in kernel["scopes"].items())
    print(f"trace written to {path}; share of the programs' time: {shares}")
    print(f"counter: {profiler.session.launches[0].counter.describe()}")


if __name__ == "__main__":
    main()
