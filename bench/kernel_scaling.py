"""Multi-core scaling of real kernels without Python on the machine that measures: compiles Spine kernels
for a generic x86-64 level into .so files, writes a manifest and builds the C driver
(bench/kernel_scaling.c) that runs them through the grid runtime on 1..N threads.

    .venv/bin/python bench/kernel_scaling.py OUT_DIR [--cpu x86-64-v3] [--matmul] [--run]

Copy OUT_DIR to the machine to measure and run `./kernel_scaling manifest.txt 16` there. The kernels are
only compiled here (triton's warmup), so a CPU name this machine cannot run (sapphirerapids' AMX on an AMD
host) builds as well. `--matmul`: the matrix products of bench/dot_matmul.py instead (fp32, int8 -> int32,
bf16 -> fp32 at 512^3 and 1024^3), to set beside torch's on that machine (bench/torch_matmul.py, which needs
only torch).
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
    for bm, bk in ((32, 32), (64, 32), (64, 64)):
        yield _matmul(matmul_kernel, f"matmul fp32 1024^3 (tl.dot, {bm}x{bm}x{bk} tiles)", a, a, torch.empty(64, 64),
                      s, bm, bk)
    rows, cols = 8192, 1000
    x = torch.rand(4, cols)
    yield ("softmax fp32 8192x1000",
           lambda: softmax_kernel.warmup(torch.empty_like(x), x, cols, cols, cols, BLOCK=1024, grid=(4,)),
           (rows, 1, 1), [f"b{4 * rows * cols}"] * 2 + [f"i{cols}"] * 3)
    n = 1 << 24
    y = torch.rand(4096)
    yield ("erf fp32 16M",
           lambda: elementwise_math_kernel.warmup(y, torch.empty_like(y), 4096, 0.5, BLOCK=4096, OP="erf", grid=(4,)),
           (n // 4096, 1, 1), [f"b{4 * n}"] * 2 + [f"i{n}", "f0.5"])
    # The same kernel on data that stays in the caches: arithmetic, not memory bandwidth, sets its speed.
    n = 1 << 20
    yield ("erf fp32 1M (cache-resident)",
           lambda: elementwise_math_kernel.warmup(y, torch.empty_like(y), 4096, 0.5, BLOCK=4096, OP="erf", grid=(4,)),
           (n // 4096, 1, 1), [f"b{4 * n}"] * 2 + [f"i{n}", "f0.5"])
    yield from layer_norm_backward_kernels()


TUTORIALS = os.path.join(ROOT, "..", "shared", "conformance", "triton-tutorials")


def tutorial_kernels(path: str) -> dict:
    """The @triton.jit functions of a tutorial, by name, defined from its own file where it lies: only its
    imports and those functions run, not the tests and benchmarks at its top level."""
    import ast
    with open(path) as f:
        tree = ast.parse(f.read(), path)

    def jitted(node):
        return isinstance(node, ast.FunctionDef) and any("jit" in ast.unparse(d) for d in node.decorator_list)
    kept = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom)) or jitted(n)]
    names = {"__name__": "tutorial_kernels", "__file__": path}
    exec(compile(ast.Module(body=kept, type_ignores=[]), path, "exec"), names)
    return {n.name: names[n.name] for n in kept if isinstance(n, ast.FunctionDef)}


def layer_norm_backward_kernels():
    """Tutorial 05's backward (its two kernels, the launches its `backward` makes) on M = 4096 fp16 rows
    of N = 1024 and 1536, its benchmark's shape: dx with the partial dw/db sums under locks, then their
    column sums. The locks start at zero and are zero again after every launch; the partial sums start at
    zero and, launch after launch, keep adding (values do not change the time)."""
    import torch
    import triton
    path = os.path.join(TUTORIALS, "05-layer-norm.py")
    if not os.path.exists(path):
        return
    kernels = tutorial_kernels(path)
    dx_fused, dwdb = kernels["_layer_norm_bwd_dx_fused"], kernels["_layer_norm_bwd_dwdb"]
    m = 4096
    h = torch.rand(64, 64).half()
    v = torch.rand(64)
    for n in (1024, 1536):
        group = 256 if n <= 1024 else 128                  # the tutorial's GROUP_SIZE_M
        block = triton.next_power_of_2(n)                  # its forward's BLOCK_SIZE
        lock = torch.zeros(2 * group, dtype=torch.int32)
        yield (f"layer-norm backward fp16 {m}x{n} (dx and partial sums)",
               lambda group=group, block=block, lock=lock: dx_fused.warmup(
                   h, h, h, h, h, h[0], v, v, lock, 64, 64, GROUP_SIZE_M=group, BLOCK_SIZE_N=block, grid=(4,)),
               (m, 1, 1), [f"h{2 * m * n}", f"h{2 * m * n}", f"z{2 * group * n}", f"z{2 * group * n}", f"h{2 * m * n}",
                           f"h{2 * n}", f"b{4 * m}", f"b{4 * m}", f"z{8 * group}", f"i{n}", f"i{n}"])
        yield (f"layer-norm backward fp16 {m}x{n} (dw and db)",
               lambda: dwdb.warmup(h, h, h[0], h[0], 64, 64, BLOCK_SIZE_M=32, BLOCK_SIZE_N=128, grid=(1,)),
               (triton.cdiv(n, 128), 1, 1), [f"h{2 * group * n}", f"h{2 * group * n}", f"h{2 * n}", f"h{2 * n}",
                                            f"i{group}", f"i{n}"])


def matmul_kernels():
    """bench/dot_matmul.py's products: the tutorial kernel in fp32, int8 -> int32 and bf16 -> fp32, one-thread
    tiles as that script measures them."""
    import torch
    from tests.ops.test_dot import matmul_kernel as float_kernel
    from tests.ops.test_matrix_unit import matmul_kernel as int_kernel
    small = {"fp32": torch.rand(64, 64), "int8": torch.ones(64, 64, dtype=torch.int8),
             "bf16": torch.rand(64, 64).bfloat16()}
    sums = {"fp32": torch.empty(64, 64), "int8": torch.empty(64, 64, dtype=torch.int32), "bf16": torch.empty(64, 64)}
    # int8 and bf16 also in deeper tiles: AMX loads and stores C's tiles once per tl.dot, so a deeper k step
    # moves less of C per product; all three also in wider ones, which pack each operand for more products:
    # every program of a column packs the same B again, so on one thread a 512-row tile packs B least often
    # (choices an autotuned kernel makes)
    tiles = {"fp32": ((64, 64), (128, 64), (256, 64), (512, 64)),
             "int8": ((128, 128), (128, 256), (128, 512), (256, 256), (128, 1024)),
             "bf16": ((128, 128), (128, 256), (256, 128), (128, 512), (256, 512), (512, 256))}
    for size in (512, 1024):
        for kind in ("fp32", "int8", "bf16"):
            kernel = int_kernel if kind == "int8" else float_kernel
            for bm, bk in tiles[kind]:
                yield _matmul(kernel, f"matmul {kind} {size}^3 ({bm}x{bm}x{bk} tiles)", small[kind], small[kind],
                              sums[kind], size, bm, bk, element=small[kind].element_size())


def _matmul(kernel, name, a, b, c, size, bm, bk, element=4):
    """A square product of `size` in bm x bm x bk tiles, compiled on 64 x 64 operands whose integer arguments
    specialise as the measured ones do (multiples of 16, unit strides)."""
    def compile_it():
        return kernel.warmup(a, b, c, 64, 64, 64, 64, 1, 64, 1, 64, 1, BM=bm, BN=bm, BK=bk, grid=(1, 1))
    args = ([f"b{element * size * size}"] * 2 + [f"b{4 * size * size}"] + [f"i{size}"] * 3
            + [f"i{size}", "i1", f"i{size}", "i1", f"i{size}", "i1"])
    return name, compile_it, (size // bm, size // bm, 1), args


def build(out_dir: str, cpu: str, matmul: bool = False) -> str:
    os.environ["SPINE_HOST_CPU"] = cpu
    import triton
    from spine.driver import CPUDriver
    from spine.zig import zig
    triton.runtime.driver.set_active(CPUDriver(target="host"))
    os.makedirs(out_dir, exist_ok=True)
    lines = []
    for index, (name, launch, grid, args) in enumerate(matmul_kernels() if matmul else kernels()):
        compiled = launch()
        # Arguments triton specialised (integers equal to 1) are constants of the binary, not its arguments.
        kinds = list(compiled.src.signature.values())
        args = [arg for arg, kind in zip(args, kinds) if kind != "constexpr"]
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
        *(os.path.join(cpp, s) for s in ("grid.c", "fault_guard.c", "device_io.c", "profile_buffers.c", "openmp_team.c",
                                             "shared_panels.c")),
        f"-I{cpp}", "-rdynamic", "-ldl", "-lpthread", "-lm", "-o", driver)
    return driver


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    parser.add_argument("--cpu", default="x86-64-v3", help="LLVM CPU name the kernels are compiled for")
    parser.add_argument("--matmul", action="store_true", help="bench/dot_matmul.py's matrix products instead")
    parser.add_argument("--run", action="store_true", help="also run the driver here")
    args = parser.parse_args()
    driver = build(args.out_dir, args.cpu, args.matmul)
    print(f"built {driver} and {args.out_dir}/manifest.txt for {args.cpu}")
    if args.run:
        os.execv(driver, [driver, os.path.join(args.out_dir, "manifest.txt")])


if __name__ == "__main__":
    main()
