"""Streaming stores on and off, and torch, in one process: the memory-bound rows of `make bench`.

    .venv/bin/python bench/streaming_stores.py [--threads N] [--rounds R]

Each row of bench/run.py's memory_bound_rows runs with SPINE_STREAMING_STORES_MB=0 (stores as before) and
with the default, which, being a compile switch, gives two builds of its kernel, and torch's kernel; the
three run in turn, R rounds of 20 calls each. Prints, per kernel, the best and median time of each and the
ratios of the best times (torch / Spine: above 1, Spine is faster)."""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)


def with_streaming(megabytes: str, call):
    def run():
        os.environ["SPINE_STREAMING_STORES_MB"] = megabytes
        call()
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=12)
    args = parser.parse_args()
    os.environ["SPINE_NUM_THREADS"] = str(args.threads)
    import torch
    import triton
    from run import memory_bound_rows
    from spine.driver import CPUDriver
    torch.set_num_threads(args.threads)
    triton.runtime.driver.set_active(CPUDriver(target="host"))
    print(f"| kernel ({args.threads} threads) | stores as before | streaming | torch | torch / before | "
          "torch / streaming |")
    print("|---|---|---|---|---|---|")
    for row in memory_bound_rows("host", quick=False):
        runs = {"before": with_streaming("0", row.spine), "streaming": with_streaming("16", row.spine),
                "torch": row.torch}
        for run in runs.values():
            run()
        times = {label: [] for label in runs}
        for _ in range(args.rounds):
            for label, run in runs.items():
                start = time.perf_counter()
                for _ in range(20):
                    run()
                times[label].append((time.perf_counter() - start) / 20 * 1e3)
        best = {label: min(values) for label, values in times.items()}
        cells = [f"{best[label]:.2f} ms (median {statistics.median(times[label]):.2f})" for label in times]
        print(f"| {row.name} | {' | '.join(cells)} | {best['torch'] / best['before']:.2f} | "
              f"{best['torch'] / best['streaming']:.2f} |")


if __name__ == "__main__":
    main()
