"""torch's matrix products at bench/kernel_scaling.py --matmul's sizes, on 1, 2, 4, ... threads: the
reference for Spine's kernels on a machine where only torch is installed (no Spine, no triton needed).

    python3 bench/torch_matmul.py [max_threads | T1,T2,...]
    python3 bench/torch_matmul.py T1,T2 --spine OUT_DIR[,OUT_DIR2,...] [--rounds 5]

fp32 and bf16 through torch.mm, int8 -> int32 through torch._int_mm (oneDNN: AMX where the CPU has it);
best of several calls, in ms, in kernel_scaling's table format. With --spine, rounds that alternate
kernel_scaling's products (OUT_DIR built with --matmul, run as a child on exactly T threads) and torch's on
the same thread count, then per product the best of all rounds on either side and their ratio: a shared
machine's clock and neighbours move both alike only when they take turns. Several OUT_DIRs (two builds of
the same manifest, before and after a change) take turns with each other and torch, a column each."""
from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import time

import torch


def best_ms(fn, reps: int = 10) -> float:
    fn()
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best * 1e3


def products(size: int):
    a32, b32 = torch.rand(size, size), torch.rand(size, size)
    a8, b8 = (torch.randint(-128, 128, (size, size), dtype=torch.int8) for _ in range(2))
    a16, b16 = a32.bfloat16(), b32.bfloat16()
    yield f"torch.mm fp32 {size}^3", lambda: torch.mm(a32, b32)
    yield f"torch._int_mm int8 {size}^3", lambda: torch._int_mm(a8, b8)
    yield f"torch.mm bf16 {size}^3", lambda: torch.mm(a16, b16)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("threads", nargs="?", default=str(os.cpu_count()))
    parser.add_argument("--spine", help="kernel_scaling.py --matmul directories (comma-separated) to alternate with")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    counts = thread_counts(args.threads)
    if args.spine:
        side_by_side(args.spine.split(","), counts, args.rounds)
        return
    print(f"torch {torch.__version__}, {torch.backends.cpu.get_cpu_capability()}")
    print("| product | threads | ms |\n|---|---|---|")
    for size in (512, 1024):
        for name, fn in products(size):
            for threads in counts:
                torch.set_num_threads(threads)
                print(f"| {name} | {threads} | {best_ms(fn):.3f} |", flush=True)


SPINE_ROW = re.compile(r"\| matmul_(\w+)_(\d+)\^3_\((\w+)_tiles\) \| (\d+) \| ([\d.]+) \|")


def side_by_side(directories: list, counts: list, rounds: int) -> None:
    spine, reference = collections.defaultdict(list), collections.defaultdict(list)
    tensors = {size: list(products(size)) for size in (512, 1024)}
    for _ in range(rounds):
        for threads in counts:
            for build, directory in enumerate(directories):
                driver, manifest = os.path.join(directory, "kernel_scaling"), os.path.join(directory, "manifest.txt")
                text = subprocess.run([driver, manifest, str(threads), "only"], check=True, capture_output=True,
                                      text=True).stdout
                for kind, size, tiles, t, ms in SPINE_ROW.findall(text):
                    spine[kind, int(size), int(t), tiles, build].append(float(ms))
            torch.set_num_threads(threads)
            for size, named in tensors.items():
                for name, fn in named:
                    reference[name.split()[1], size, threads].append(best_ms(fn))
    print(f"torch {torch.__version__}; best of {rounds} rounds, each the best of several calls")
    names = [os.path.basename(os.path.normpath(d)) for d in directories]
    heads = " | ".join(f"{n} ms" for n in names) if len(names) > 1 else "Spine ms"
    print(f"| product | threads | tiles | {heads} | torch ms | torch / Spine |")
    print("|---|---|---|" + "---|" * len(names) + "---|---|")
    products_run = sorted({key[:4] for key in spine},
                          key=lambda k: (k[2], k[1], ["fp32", "int8", "bf16"].index(k[0]), k[3]))
    for key in products_run:
        times = [min(spine[key + (b,)], default=float("nan")) for b in range(len(names))]
        best = min(reference[key[:3]])
        ratios = " / ".join(f"{best / ms:.2f}" for ms in times)
        print(f"| {key[0]} {key[1]}^3 | {key[2]} | {key[3]} | " + " | ".join(f"{ms:.3f}" for ms in times)
              + f" | {best:.3f} | {ratios} |")


def thread_counts(text: str) -> list:
    """"16" -> 1, 2, 4, 8, 16 (kernel_scaling's counts); "1,16" -> those."""
    if "," in text:
        return [int(t) for t in text.split(",")]
    top, counts, t = int(text), [], 1
    while t < top:
        counts.append(t)
        t *= 2
    return counts + [top]


if __name__ == "__main__":
    main()
