"""Spine benchmarks: compile times, launch overhead, kernel time against torch, and riscv64 instruction
counts against hand-written references.

    .venv/bin/python bench/run.py [--quick] [--no-write]

Each target runs in a process of its own (`bench/run.py --target host|riscv64`, which prints its results
as JSON); this process collects them, prints a markdown report, writes it into bench/RESULTS.md (the
section between the BEGIN/END markers) and plots the host's torch/Spine ratios into bench/ratios.png.

Timing: torch and Spine run side by side in one process, alternating, `REPEATS` rounds of a few calls each;
a row reports the range of torch time / Spine time over the rounds (above 1: Spine is faster) and the
median times. Wall-clock figures under QEMU measure the emulator, not a RISC-V core: use them only to
compare Spine with itself; the instruction counts are the riscv64 figures.

Rows from other benchmark modules: every module named in ROW_MODULES (bench/<name>.py) that exists and
defines `rows(target, quick)`, an iterable of Row, adds its rows to the kernel table."""
from __future__ import annotations

import argparse
import datetime
import importlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Callable, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

ROW_MODULES = ("launch", "smt_matmul")
REPEATS = {"host": 15, "riscv64": 3}
ROUND_SECONDS = {"host": 0.3, "riscv64": 0.05}     # each side of a round calls its kernel this long
RESULTS = os.path.join(HERE, "RESULTS.md")
PLOT = os.path.join(HERE, "ratios.png")
BEGIN = "<!-- BEGIN bench/run.py: written by `make bench`, edit the script rather than this section -->"
END = "<!-- END bench/run.py -->"


@dataclass
class Row:
    """One kernel against torch: `spine` and `torch` run the same work (`work` units of `unit` per call);
    `check`, run once after both, raises when Spine's result is wrong; `goal` is the torch/Spine time ratio
    aimed for (host)."""
    name: str
    spine: Callable[[], object]
    torch: Callable[[], object]
    work: float
    unit: str
    check: Optional[Callable[[], None]] = None
    goal: Optional[float] = None


def emulated(target: str) -> bool:
    return target == "riscv64" and platform.machine() != "riscv64"


# ------------------------------------------------------------------------------------------ kernels

def _kernels():
    import triton
    import triton.language as tl

    @triton.jit
    def layer_norm_kernel(x_ptr, w_ptr, b_ptr, out_ptr, stride, n_cols, eps, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0)
        mean = tl.sum(x, axis=0) / n_cols
        centred = tl.where(mask, x - mean, 0.0)
        rstd = 1.0 / tl.sqrt(tl.sum(centred * centred, axis=0) / n_cols + eps)
        w = tl.load(w_ptr + cols, mask=mask)
        b = tl.load(b_ptr + cols, mask=mask)
        tl.store(out_ptr + row * stride + cols, centred * rstd * w + b, mask=mask)

    @triton.jit
    def gelu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask)
        tl.store(out_ptr + offs, 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476)), mask=mask)
    return layer_norm_kernel, gelu_kernel


_KERNELS = None


def kernels():
    global _KERNELS
    if _KERNELS is None:
        _KERNELS = _kernels()
    return _KERNELS


def memory_bound_rows(target: str, quick: bool):
    """Vector add, row softmax, layer norm and GELU (erf): the memory-bound and math rows."""
    import torch
    import triton
    from tests.kernels import add_kernel, softmax_kernel
    layer_norm_kernel, gelu_kernel = kernels()
    small = emulated(target) or quick
    n = 1 << (16 if small else 24)
    x, y, out = torch.rand(n), torch.rand(n), torch.empty(n)
    yield Row(f"vector add fp32 n={n}", lambda: add_kernel[(triton.cdiv(n, 4096),)](x, y, out, n, BLOCK=4096),
              lambda: torch.add(x, y, out=out), 3 * n * 4, "GB/s",
              lambda: torch.testing.assert_close(out, x + y), goal=1.0)
    # torch writes softmax and GELU into preallocated outputs (their `out=` variants), as Spine's kernels
    # do: GELU's fresh 64 MiB output per call timed torch's page faults too (glibc maps an allocation that
    # large anew each time), 25 ms against 6.5 ms for its kernel. Layer norm's out variant takes a slower
    # path (5.3 ms against 2.3 ms); its 32 MB output stays under the mmap threshold and is reused.
    rows, cols = (64, 1000) if small else (8192, 1000)
    a = torch.randn(rows, cols)
    b, torch_out = torch.empty_like(a), torch.empty_like(a)
    yield Row(f"softmax fp32 {rows}x{cols}",
              lambda: softmax_kernel[(rows,)](b, a, a.stride(0), b.stride(0), cols, BLOCK=1024),
              lambda: torch.ops.aten._softmax.out(a, 1, False, out=torch_out), 2 * rows * cols * 4, "GB/s",
              lambda: torch.testing.assert_close(b, torch.softmax(a, dim=1)), goal=1.3)
    w, bias = torch.randn(cols), torch.randn(cols)
    ln = torch.empty_like(a)
    yield Row(f"layer norm fp32 {rows}x{cols}",
              lambda: layer_norm_kernel[(rows,)](a, w, bias, ln, a.stride(0), cols, 1e-5, BLOCK=1024),
              lambda: torch.nn.functional.layer_norm(a, (cols,), w, bias, 1e-5), 2 * rows * cols * 4, "GB/s",
              lambda: torch.testing.assert_close(ln, torch.nn.functional.layer_norm(a, (cols,), w, bias, 1e-5),
                                                 rtol=1e-4, atol=1e-4), goal=1.3)
    g = torch.randn(n)
    gout, torch_gout = torch.empty_like(g), torch.empty_like(g)
    yield Row(f"GELU (erf) fp32 n={n}", lambda: gelu_kernel[(triton.cdiv(n, 4096),)](g, gout, n, BLOCK=4096),
              lambda: torch.ops.aten.gelu.out(g, out=torch_gout), 2 * n * 4, "GB/s",
              lambda: torch.testing.assert_close(gout, torch.nn.functional.gelu(g)), goal=1.0)


def other_rows(target: str, quick: bool):
    """Matmul (tl.dot) and transpose."""
    import torch
    from tests.kernels import transpose_kernel
    from tests.ops.test_dot import matmul_kernel
    small = emulated(target) or quick
    s = 64 if small else 512
    ma, mb, mc = torch.randn(s, s), torch.randn(s, s), torch.empty(s, s)
    # 64 x 64 x 64 tiles: the best here of 64 x 64 x {32, 64, 128} (64 programs; 128 x 128 x 64 was as fast)
    tile = 32 if small else 64
    yield Row(f"matmul fp32 {s}x{s}x{s}",
              lambda: matmul_kernel[(s // tile, s // tile)](ma, mb, mc, s, s, s, s, 1, s, 1, s, 1, BM=tile, BN=tile,
                                                            BK=32 if small else 64),
              lambda: torch.matmul(ma, mb, out=mc), 2 * s ** 3, "GFLOP/s",
              lambda: torch.testing.assert_close(mc, ma @ mb, rtol=1e-4, atol=1e-4))
    m = 256 if small else 2048
    t, u = torch.randn(m, m), torch.empty(m, m)
    yield Row(f"transpose fp32 {m}x{m}",
              lambda: transpose_kernel[(m // 32, m // 32)](t, u, m, m, t.stride(0), t.stride(1), u.stride(0),
                                                           u.stride(1), BM=32, BN=32),
              lambda: u.copy_(t.t()), 2 * m * m * 4, "GB/s", lambda: torch.testing.assert_close(u, t.t()))


def all_rows(target: str, quick: bool):
    yield from memory_bound_rows(target, quick)
    yield from other_rows(target, quick)
    for name in ROW_MODULES:
        if not os.path.exists(os.path.join(HERE, f"{name}.py")):
            continue
        module = importlib.import_module(name)
        if hasattr(module, "rows"):
            yield from module.rows(target, quick)


# ----------------------------------------------------------------------------------------- measuring

def side_by_side(row: Row, repeats: int, round_seconds: float) -> dict:
    """Alternating rounds of torch and Spine calls; per round the mean time of each. On a shared machine the
    ratio of the best times is the steadiest figure; the range of the per-round ratios shows the noise."""
    row.spine()
    row.torch()
    if row.check is not None:
        row.spine()
        row.check()
    start = time.perf_counter()
    row.spine()
    once = time.perf_counter() - start
    calls = max(1, min(1000, int(round_seconds / max(once, 1e-9))))
    torch_times, spine_times = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            row.torch()
        middle = time.perf_counter()
        for _ in range(calls):
            row.spine()
        end = time.perf_counter()
        torch_times.append((middle - start) / calls)
        spine_times.append((end - middle) / calls)
    ratios = [t / s for t, s in zip(torch_times, spine_times)]
    spine_median = statistics.median(spine_times)
    return {"name": row.name, "spine": spine_median, "torch": statistics.median(torch_times),
            "ratio_min": min(ratios), "ratio_max": max(ratios), "ratio_median": statistics.median(ratios),
            "ratio_best": min(torch_times) / min(spine_times),
            "throughput": row.work / spine_median / 1e9, "unit": row.unit, "goal": row.goal}


def compile_times(target: str) -> tuple[float, float]:
    """(cold, warm) seconds for the vector add: cold compiles every stage, warm loads from the disk cache.
    A different kernel is compiled first, so that one-time costs (imports, LLVM initialisation, building
    the C runtime on first use) are not counted."""
    import torch
    import triton
    from tests.kernels import add_kernel, transpose_kernel
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


def launch_overhead() -> float:
    import torch
    from tests.kernels import add_kernel
    one, res = torch.rand(1), torch.empty(1)
    add_kernel[(1,)](one, one, res, 1, BLOCK=16)
    samples = []
    for _ in range(200):
        start = time.perf_counter()
        add_kernel[(1,)](one, one, res, 1, BLOCK=16)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def instruction_counts() -> list[dict]:
    """Guest instructions of one launch (riscv64 under QEMU, deterministic: counted twice and compared),
    beside hand-written references for the same work where there is one."""
    import torch
    from icount import count_instructions
    from reference import build_reference, run_reference
    from spine.driver.arguments import Param
    out_dir = tempfile.mkdtemp(prefix="spine-reference-")

    def reference(name, grid, params, values, written, check):
        so = build_reference(name, out_dir)
        count = count_instructions(lambda: run_reference(so, grid, params, values, written))
        check()
        return count

    n = 1 << 16
    x, y, out = torch.rand(n), torch.rand(n), torch.empty(n)
    f32 = [Param(0, "x", "*fp32"), Param(1, "y", "*fp32"), Param(2, "out", "*fp32")]
    references = {
        f"vector add fp32 n={n}": lambda: reference(
            "vector_add", (n // 4096, 1, 1), f32 + [Param(3, "n", "i32")], [x, y, out, n], {2},
            lambda: torch.testing.assert_close(out, x + y)),
        "softmax fp32 64x1000": lambda: _softmax_reference(reference),
        "matmul fp32 64x64x64": lambda: _matmul_reference(reference, f32),
        "transpose fp32 256x256": lambda: _transpose_reference(reference, f32),
    }
    results = []
    for row in list(memory_bound_rows("riscv64", True)) + list(other_rows("riscv64", True)):
        count = count_instructions(row.spine)
        again = count_instructions(row.spine)
        assert count == again, (row.name, count, again)
        if row.check is not None:
            row.check()
        ref = references[row.name]() if row.name in references else None
        results.append({"name": row.name, "spine": count, "reference": ref})
    return results


def _softmax_reference(reference):
    import torch
    from spine.driver.arguments import Param
    rows, cols = 64, 1000
    a, b = torch.randn(rows, cols), torch.empty(rows, cols)
    params = [Param(0, "out", "*fp32"), Param(1, "in", "*fp32"), Param(2, "in_stride", "i32"),
              Param(3, "out_stride", "i32"), Param(4, "n", "i32")]
    return reference("softmax", (rows, 1, 1), params, [b, a, cols, cols, cols], {0},
                     lambda: torch.testing.assert_close(b, torch.softmax(a, dim=1)))


def _matmul_reference(reference, f32):
    import torch
    from spine.driver.arguments import Param
    s = 64
    a, b, c = torch.randn(s, s), torch.randn(s, s), torch.empty(s, s)
    return reference("matmul", (s // 32, s // 32, 1), f32 + [Param(3, "n", "i32")], [a, b, c, s], {2},
                     lambda: torch.testing.assert_close(c, a @ b, rtol=1e-4, atol=1e-4))


def _transpose_reference(reference, f32):
    import torch
    from spine.driver.arguments import Param
    m = 256
    t, u = torch.randn(m, m), torch.empty(m, m)
    return reference("transpose", (m // 32, m // 32, 1), f32[:2] + [Param(2, "m", "i32")], [t, u, m], {1},
                     lambda: torch.testing.assert_close(u, t.t()))


def run_target(target: str, quick: bool) -> dict:
    """Everything for one target, in this process."""
    import torch
    import triton
    from spine.driver import CPUDriver
    triton.runtime.driver.set_active(CPUDriver(target=target))
    threads = int(os.environ.get("SPINE_NUM_THREADS", os.cpu_count()))
    torch.set_num_threads(threads)
    cold, warm = compile_times(target)
    result = {"target": target, "threads": threads, "torch_threads": torch.get_num_threads(),
              "cold": cold, "warm": warm, "overhead": launch_overhead(), "rows": []}
    for row in all_rows(target, quick):
        result["rows"].append(side_by_side(row, REPEATS[target], ROUND_SECONDS[target]))
        print(f"  {target}: {row.name}", file=sys.stderr, flush=True)
    if emulated(target):
        result["counts"] = instruction_counts()
    return result


# -------------------------------------------------------------------------------------------- report

def report(results: list[dict], command: str) -> str:
    host = next((r for r in results if r["target"] == "host"), results[0])
    lines = [f"Command: {command}, {datetime.date.today().isoformat()}, on {platform.machine()} "
             f"({os.cpu_count()} cores, {_cpu_name()}); Spine's grid on {host['threads']} threads, torch on "
             f"{host['torch_threads']}. Each target ran in a process of its own.", "",
             "| target | vector add cold compile | warm (disk cache) | launch overhead (n=1) |", "|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['target']} | {r['cold'] * 1e3:.0f} ms | {r['warm'] * 1e3:.1f} ms | "
                     f"{r['overhead'] * 1e6:.0f} us |")
    lines += ["", f"Kernel time, torch and Spine alternating in one process ({REPEATS['host']} rounds of "
              f"{ROUND_SECONDS['host']} s a side on the host, {REPEATS['riscv64']} under QEMU). *torch / Spine* "
              "(above 1: Spine is faster): the range of the per-round ratios, and the ratio of the best times; "
              "the times are medians.", "",
              "| target | kernel | Spine | torch | torch / Spine, rounds | best times | goal | Spine throughput |",
              "|---|---|---|---|---|---|---|---|"]
    for r in results:
        for row in r["rows"]:
            goal = f"≥ {row['goal']:.1f}" if row["goal"] and r["target"] == "host" else ""
            lines.append(f"| {r['target']} | {row['name']} | {row['spine'] * 1e3:.3f} ms | {row['torch'] * 1e3:.3f} ms"
                         f" | {row['ratio_min']:.2f}–{row['ratio_max']:.2f} | {row['ratio_best']:.2f} | {goal} | "
                         f"{row['throughput']:.2f} {row['unit']} |")
    counts = next((r["counts"] for r in results if "counts" in r), None)
    if counts:
        lines += ["", "| riscv64 kernel (QEMU, VLEN 256) | guest instructions, one launch | hand-written C (clang -O3, "
                  "RVV) | Spine / reference |", "|---|---|---|---|"]
        for c in counts:
            ref = f"{c['reference']:,}" if c["reference"] else "—"
            ratio = f"{c['spine'] / c['reference']:.2f}x" if c["reference"] else "—"
            lines.append(f"| {c['name']} | {c['spine']:,} | {ref} | {ratio} |")
    if os.path.exists(PLOT):
        lines += ["", f"![host torch/Spine time ratios]({os.path.basename(PLOT)})"]
    return "\n".join(lines) + "\n"


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def plot(results: list[dict]) -> None:
    """Bar chart of the host's torch/Spine ratios (median, with the range over rounds) and the goals."""
    host = next((r for r in results if r["target"] == "host"), None)
    if host is None:
        return
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = host["rows"]
    fig, ax = plt.subplots(figsize=(9, 0.5 * len(rows) + 1.5))
    ys = range(len(rows))
    medians = [r["ratio_median"] for r in rows]
    errors = [[m - r["ratio_min"] for m, r in zip(medians, rows)], [r["ratio_max"] - m for m, r in zip(medians, rows)]]
    ax.barh(list(ys), medians, xerr=errors, color="#4c72b0", capsize=3, label="median round (bar: range)")
    ax.plot([r["ratio_best"] for r in rows], list(ys), "D", color="#dd8452", label="best times")
    for y, r in zip(ys, rows):
        if r["goal"]:
            ax.plot([r["goal"]] * 2, [y - 0.4, y + 0.4], color="#c44e52", linewidth=2)
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_yticks(list(ys), [r["name"] for r in rows])
    ax.invert_yaxis()
    ax.set_xlabel("torch time / Spine time (above 1: Spine faster; red: goal)")
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title(f"host, {host['threads']} threads, {datetime.date.today().isoformat()}")
    fig.tight_layout()
    fig.savefig(PLOT, dpi=110)
    plt.close(fig)


def write_results(text: str) -> None:
    section = f"{BEGIN}\n{text}{END}\n"
    current = open(RESULTS).read() if os.path.exists(RESULTS) else "# Benchmark results\n"
    if BEGIN in current and END in current:
        before, rest = current.split(BEGIN, 1)
        after = rest.split(END, 1)[1].lstrip("\n")
        updated = before + section + ("\n" + after if after else "")
    else:
        title, _, body = current.partition("\n")
        updated = f"{title}\n\n## Kernel time against torch, compile and launch ({'`make bench`'})\n\n{section}\n{body.lstrip()}"
    with open(RESULTS, "w") as f:
        f.write(updated)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="small sizes everywhere")
    parser.add_argument("--target", choices=("host", "riscv64"), help="run one target here, print JSON")
    parser.add_argument("--targets", default="host,riscv64", help="targets to run (each in its own process)")
    parser.add_argument("--no-write", action="store_true", help="print only; leave RESULTS.md and the plot")
    args = parser.parse_args()
    os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="spine-bench-cache-"))
    if args.target:
        print(json.dumps(run_target(args.target, args.quick)))
        return
    results = []
    for target in args.targets.split(","):
        cmd = [sys.executable, os.path.abspath(__file__), "--target", target] + (["--quick"] if args.quick else [])
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=True)
        results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    command = "`.venv/bin/python bench/run.py --quick`" if args.quick else \
        "`make bench` (that is, `.venv/bin/python bench/run.py`)"
    if not args.no_write:
        plot(results)
    text = report(results, command)
    print(text)
    if not args.no_write:
        write_results(text)


if __name__ == "__main__":
    main()
