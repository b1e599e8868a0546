"""Spine benchmarks: compile times, launch overhead, and kernel time against torch, for each target.

    .venv/bin/python bench/run.py [--quick]

Prints a markdown report (bench/RESULTS.md keeps the latest one with the command that produced it).
Wall-clock figures under QEMU measure the emulator, not a RISC-V core: use them only to compare Spine
with itself."""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time

import torch
import triton

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from spine.driver import CPUDriver  # noqa: E402
from tests.kernels import add_kernel, softmax_kernel, transpose_kernel  # noqa: E402
from tests.ops.test_dot import matmul_kernel  # noqa: E402


def timed(fn, repeat: int) -> float:
    """Median seconds per call."""
    fn()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def compile_times(target: str) -> tuple[float, float]:
    """(cold, warm) seconds for the vector add: cold compiles every stage, warm loads from the disk cache.

    A different kernel is compiled first, so that one-time costs (imports, LLVM initialisation, building
    the C runtime on first use) are not counted."""
    triton.runtime.driver.set_active(CPUDriver(target=target))
    x = torch.rand(1024)
    out = torch.empty(1024)
    warm_up = torch.empty(1024 * 8)
    transpose_kernel[(1, 1)](warm_up, warm_up, 32, 32, 32, 1, 32, 1, BM=32, BN=32)
    start = time.perf_counter()
    triton.jit(add_kernel.fn)[(1,)](x, x, out, 1024, BLOCK=1024)
    cold = time.perf_counter() - start
    start = time.perf_counter()
    triton.jit(add_kernel.fn)[(1,)](x, x, out, 1024, BLOCK=1024)
    warm = time.perf_counter() - start
    return cold, warm


def cases(target: str, quick: bool):
    small = target == "riscv64" and platform.machine() != "riscv64"
    n = 1 << (16 if small or quick else 22)
    x, y, out = torch.rand(n), torch.rand(n), torch.empty(n)
    yield (f"vector add fp32 n={n}", (3 * n * 4, "GB/s"),
           lambda: add_kernel[(triton.cdiv(n, 4096),)](x, y, out, n, BLOCK=4096), lambda: torch.add(x, y, out=out))
    rows, cols = (64, 781) if small or quick else (4096, 781)
    a = torch.randn(rows, cols)
    b = torch.empty_like(a)
    yield (f"softmax fp32 {rows}x{cols}", (2 * rows * cols * 4, "GB/s"),
           lambda: softmax_kernel[(rows,)](b, a, a.stride(0), b.stride(0), cols, BLOCK=1024),
           lambda: torch.softmax(a, dim=1))
    s = 64 if small or quick else 512
    ma, mb, mc = torch.randn(s, s), torch.randn(s, s), torch.empty(s, s)
    yield (f"matmul fp32 {s}x{s}x{s}", (2 * s ** 3, "GFLOP/s"),
           lambda: matmul_kernel[(s // 32, s // 32)](ma, mb, mc, s, s, s, s, 1, s, 1, s, 1, BM=32, BN=32, BK=32),
           lambda: torch.matmul(ma, mb, out=mc))
    m = 256 if small or quick else 2048
    t = torch.randn(m, m)
    u = torch.empty(m, m)
    yield (f"transpose fp32 {m}x{m}", (2 * m * m * 4, "GB/s"),
           lambda: transpose_kernel[(m // 32, m // 32)](t, u, m, m, t.stride(0), t.stride(1), u.stride(0),
                                                        u.stride(1), BM=32, BN=32),
           lambda: u.copy_(t.t()))


def instruction_counts():
    """Deterministic guest instruction counts per kernel (riscv64, under QEMU)."""
    from icount import count_instructions
    triton.runtime.driver.set_active(CPUDriver(target="riscv64"))
    for name, _, spine_fn, _ in cases("riscv64", quick=True):
        count = count_instructions(spine_fn)
        again = count_instructions(spine_fn)
        assert count == again, (name, count, again)
        yield name, count


def reference_instruction_counts():
    """Instruction counts of hand-written C references for the same work (riscv64, under QEMU), each
    checked against torch. Sizes match cases(quick=True)."""
    from icount import count_instructions
    from reference import build_reference, run_reference
    from spine.driver.arguments import Param
    out_dir = tempfile.mkdtemp(prefix="spine-reference-")

    def count(name, grid, params, values, written, check):
        so = build_reference(name, out_dir)
        result = count_instructions(lambda: run_reference(so, grid, params, values, written))
        check()
        return result

    n = 1 << 16
    x, y, out = torch.rand(n), torch.rand(n), torch.empty(n)
    ptr = [Param(0, "x", "*fp32"), Param(1, "y", "*fp32"), Param(2, "out", "*fp32")]
    yield f"vector add fp32 n={n}", count("vector_add", (n // 4096, 1, 1), ptr + [Param(3, "n", "i32")],
                                          [x, y, out, n], {2}, lambda: torch.testing.assert_close(out, x + y))
    s = 64
    a, b, c = torch.randn(s, s), torch.randn(s, s), torch.empty(s, s)
    yield f"matmul fp32 {s}x{s}x{s}", count(
        "matmul", (s // 32, s // 32, 1), ptr + [Param(3, "n", "i32")], [a, b, c, s], {2},
        lambda: torch.testing.assert_close(c, a @ b, rtol=1e-4, atol=1e-4))
    m = 256
    t, u = torch.randn(m, m), torch.empty(m, m)
    yield f"transpose fp32 {m}x{m}", count(
        "transpose", (m // 32, m // 32, 1), ptr[:2] + [Param(2, "m", "i32")], [t, u, m], {1},
        lambda: torch.testing.assert_close(u, t.t()))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="small sizes everywhere")
    args = parser.parse_args()
    os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="spine-bench-cache-"))
    threads = os.environ.get("SPINE_NUM_THREADS", str(os.cpu_count()))
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, SPINE_NUM_THREADS={threads}, "
          f"torch threads={torch.get_num_threads()}\n")
    print("| target | vector add cold compile | warm (disk cache) | launch overhead (n=1) |")
    print("|---|---|---|---|")
    for target in ("host", "riscv64"):
        cold, warm = compile_times(target)
        one = torch.rand(1)
        res = torch.empty(1)
        overhead = timed(lambda: add_kernel[(1,)](one, one, res, 1, BLOCK=16), 200)
        print(f"| {target} | {cold * 1e3:.0f} ms | {warm * 1e3:.1f} ms | {overhead * 1e6:.0f} us |")
    print()
    print("| target | kernel | Spine | torch | Spine / torch time | Spine throughput |")
    print("|---|---|---|---|---|---|")
    for target in ("host", "riscv64"):
        triton.runtime.driver.set_active(CPUDriver(target=target))
        for name, (work, unit), spine_fn, torch_fn in cases(target, args.quick):
            repeat = 5 if target == "riscv64" else 50
            t_spine = timed(spine_fn, repeat)
            t_torch = timed(torch_fn, repeat)
            print(f"| {target} | {name} | {t_spine * 1e3:.3f} ms | {t_torch * 1e3:.3f} ms | "
                  f"{t_spine / t_torch:.2f} | {work / t_spine / 1e9:.2f} {unit} |")
    if platform.machine() != "riscv64":
        print()
        references = dict(reference_instruction_counts())
        print("| riscv64 kernel (QEMU, VLEN 256) | guest instructions in the kernel, one launch | "
              "hand-written C (clang -O3, RVV) |")
        print("|---|---|---|")
        for name, count in instruction_counts():
            reference = f"{references[name]:,}" if name in references else "—"
            print(f"| {name} | {count:,} | {reference} |")


if __name__ == "__main__":
    main()
