"""Multi-core scaling of real kernels without Python on the machine that measures: compiles Spine kernels
for a generic x86-64 level into .so files, writes a manifest and builds the C driver
(bench/kernel_scaling.c) that runs them through the grid runtime on 1..N threads.

    .venv/bin/python bench/kernel_scaling.py OUT_DIR [--cpu x86-64-v3] [--run]

Copy OUT_DIR to the machine to measure and run `./kernel_scaling manifest.txt 16` there.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def kernels():
    """(name, launch on small tensors that compiles it, grid and manifest arguments at the measured size).

    The small launches use the same integer values modulo 16 and the same unit strides as the measured
    ones, so triton's argument specialisation picks the same binary."""
    import torch
    from tests.kernels import elementwise_math_kernel, softmax_kernel
    from tests.ops.test_dot import matmul_kernel

    s = 1024
    a = torch.rand(64, 64)
    yield ("matmul fp32 1024^3 (tl.dot, 32x32x32 tiles)",
           lambda: matmul_kernel[(2, 2)](a, a, torch.empty(64, 64), 64, 64, 64, 64, 1, 64, 1, 64, 1,
                                         BM=32, BN=32, BK=32),
           (s // 32, s // 32, 1), [f"b{4 * s * s}"] * 3 + [f"i{s}"] * 3 + [f"i{s}", "i1", f"i{s}", "i1", f"i{s}", "i1"])
    yield ("matmul fp32 1024^3 (tl.dot, 64x64x32 tiles)",
           lambda: matmul_kernel[(1, 1)](a, a, torch.empty(64, 64), 64, 64, 64, 64, 1, 64, 1, 64, 1,
                                         BM=64, BN=64, BK=32),
           (s // 64, s // 64, 1), [f"b{4 * s * s}"] * 3 + [f"i{s}"] * 3 + [f"i{s}", "i1", f"i{s}", "i1", f"i{s}", "i1"])
    yield ("matmul fp32 1024^3 (tl.dot, 64x64x64 tiles)",
           lambda: matmul_kernel[(1, 1)](a, a, torch.empty(64, 64), 64, 64, 64, 64, 1, 64, 1, 64, 1,
                                         BM=64, BN=64, BK=64),
           (s // 64, s // 64, 1), [f"b{4 * s * s}"] * 3 + [f"i{s}"] * 3 + [f"i{s}", "i1", f"i{s}", "i1", f"i{s}", "i1"])
    rows, cols = 8192, 1000
    x = torch.rand(4, cols)
    yield ("softmax fp32 8192x1000",
           lambda: softmax_kernel[(4,)](torch.empty_like(x), x, cols, cols, cols, BLOCK=1024),
           (rows, 1, 1), [f"b{4 * rows * cols}"] * 2 + [f"i{cols}"] * 3)
    n = 1 << 24
    y = torch.rand(4096)
    yield ("erf fp32 16M",
           lambda: elementwise_math_kernel[(4,)](y, torch.empty_like(y), 4096, 0.5, BLOCK=4096, OP="erf"),
           (n // 4096, 1, 1), [f"b{4 * n}"] * 2 + [f"i{n}", "f0.5"])
    # The same kernel on data that stays in the caches: arithmetic, not memory bandwidth, sets its speed.
    n = 1 << 20
    yield ("erf fp32 1M (cache-resident)",
           lambda: elementwise_math_kernel[(4,)](y, torch.empty_like(y), 4096, 0.5, BLOCK=4096, OP="erf"),
           (n // 4096, 1, 1), [f"b{4 * n}"] * 2 + [f"i{n}", "f0.5"])


def build(out_dir: str, cpu: str) -> str:
    os.environ["SPINE_HOST_CPU"] = cpu
    import triton
    from spine.driver import CPUDriver
    from spine.zig import zig
    triton.runtime.driver.set_active(CPUDriver(target="host"))
    os.makedirs(out_dir, exist_ok=True)
    lines = []
    for index, (name, launch, grid, args) in enumerate(kernels()):
        compiled = launch()
        so = f"kernel{index}.so"
        with open(os.path.join(out_dir, so), "wb") as f:
            f.write(compiled.asm["so"])
        lines.append(" ".join([name.replace(" ", "_"), so, *map(str, grid), *args]))
    with open(os.path.join(out_dir, "manifest.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    cpp = os.path.join(ROOT, "cpp")
    driver = os.path.join(out_dir, "kernel_scaling")
    # glibc 2.28: runs on any machine from the last several years; dynamic, because it dlopens kernels.
    zig("cc", "-target", "x86_64-linux-gnu.2.28", "-O2", os.path.join(ROOT, "bench", "kernel_scaling.c"),
        *(os.path.join(cpp, s) for s in ("grid.c", "fault_guard.c", "device_io.c", "profile_buffers.c", "openmp_team.c")),
        f"-I{cpp}", "-rdynamic", "-ldl", "-lpthread", "-lm", "-o", driver)
    return driver


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    parser.add_argument("--cpu", default="x86-64-v3", help="LLVM CPU name the kernels are compiled for")
    parser.add_argument("--run", action="store_true", help="also run the driver here")
    args = parser.parse_args()
    driver = build(args.out_dir, args.cpu)
    print(f"built {driver} and {args.out_dir}/manifest.txt for {args.cpu}")
    if args.run:
        os.execv(driver, [driver, os.path.join(args.out_dir, "manifest.txt")])


if __name__ == "__main__":
    main()
