"""Streaming stores on and off, and torch, in one process: the memory-bound rows of `make bench`.

    .venv/bin/python bench/streaming_stores.py [--threads N] [--rounds R]

Each kernel is compiled twice, with SPINE_STREAMING_STORES_MB=0 (stores as before) and with the default,
and the two builds and torch's kernel run in turn, R rounds of 20 calls each. Prints, per kernel, the best
and median time of each and the ratios of the best times (torch / Spine: above 1, Spine is faster)."""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)


def cases():
    import torch
    import run
    from tests.kernels import add_kernel, softmax_kernel
    layer_norm_kernel, gelu_kernel = run.kernels()
    n, rows, cols = 1 << 24, 8192, 1000
    x, y, out = torch.rand(n), torch.rand(n), torch.empty(n)
    a, b = torch.randn(rows, cols), torch.empty(rows, cols)
    w, bias = torch.randn(cols), torch.randn(cols)
    g, gout = torch.randn(n), torch.empty(n)
    return {
        "vector add fp32 n=16777216": (add_kernel.fn, lambda k: k[(n // 4096,)](x, y, out, n, BLOCK=4096),
                                       lambda: torch.add(x, y, out=out)),
        "softmax fp32 8192x1000": (softmax_kernel.fn,
                                   lambda k: k[(rows,)](b, a, a.stride(0), b.stride(0), cols, BLOCK=1024),
                                   lambda: torch.ops.aten._softmax.out(a, 1, False, out=b)),
        "layer norm fp32 8192x1000": (layer_norm_kernel.fn,
                                      lambda k: k[(rows,)](a, w, bias, b, a.stride(0), cols, 1e-5, BLOCK=1024),
                                      lambda: torch.nn.functional.layer_norm(a, (cols,), w, bias, 1e-5)),
        "GELU (erf) fp32 n=16777216": (gelu_kernel.fn, lambda k: k[(n // 4096,)](g, gout, n, BLOCK=4096),
                                       lambda: torch.ops.aten.gelu.out(g, out=gout)),
    }


def build(fn, call, streaming_mb: str):
    import triton
    os.environ["SPINE_STREAMING_STORES_MB"] = streaming_mb
    kernel = triton.jit(fn)
    call(kernel)
    return kernel


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=12)
    args = parser.parse_args()
    os.environ["SPINE_NUM_THREADS"] = str(args.threads)
    os.environ["TRITON_ALWAYS_COMPILE"] = "1"   # the two builds differ only in a compile switch
    import torch
    import triton
    from spine.driver import CPUDriver
    torch.set_num_threads(args.threads)
    triton.runtime.driver.set_active(CPUDriver(target="host"))
    print(f"| kernel ({args.threads} threads) | stores as before | streaming | torch | torch / before | "
          "torch / streaming |")
    print("|---|---|---|---|---|---|")
    for name, (fn, call, torch_call) in cases().items():
        before, streaming = build(fn, call, "0"), build(fn, call, "16")
        times = {"before": [], "streaming": [], "torch": []}
        runs = (("before", lambda: call(before)), ("streaming", lambda: call(streaming)), ("torch", torch_call))
        for _ in range(args.rounds):
            for label, run_once in runs:
                start = time.perf_counter()
                for _ in range(20):
                    run_once()
                times[label].append((time.perf_counter() - start) / 20 * 1e3)
        best = {label: min(values) for label, values in times.items()}
        cells = [f"{best[label]:.2f} ms (median {statistics.median(times[label]):.2f})" for label in times]
        print(f"| {name} | {' | '.join(cells)} | {best['torch'] / best['before']:.2f} | "
              f"{best['torch'] / best['streaming']:.2f} |")


if __name__ == "__main__":
    main()
