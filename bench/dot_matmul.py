"""tl.dot matmul kernels on the host against torch on one thread: the tutorial-shaped kernel the tests use
(tests/ops/test_dot.py, 512^3 fp32 in 64 x 64 x 32 tiles, as `make bench` runs it on every core) and
the linear-layer kernel Inductor calls for MiniLM (spine/inductor/matmul.py: x @ W^T + bias with W as
nn.Linear keeps it, x of 130 and 264 rows, the tokens of bench/minilm.py's batches).

    .venv/bin/python bench/dot_matmul.py [--rounds N]

One process, one thread (torch.set_num_threads(1), SPINE_NUM_THREADS=1); Spine and torch run in turn,
`calls` calls a side per round; each figure is the launching thread's CPU time per call (time.thread_time),
the best round, which another process on a shared machine disturbs least. torch / Spine above 1: Spine is
faster."""
from __future__ import annotations

import argparse
import os
import sys
import time

os.environ["SPINE_NUM_THREADS"] = "1"
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402
import triton  # noqa: E402


def best_per_call(fns, rounds: int, calls: int) -> list:
    best = [float("inf")] * len(fns)
    for _ in range(rounds):
        for i, fn in enumerate(fns):
            start = time.thread_time()
            for _ in range(calls):
                fn()
            best[i] = min(best[i], (time.thread_time() - start) / calls)
    return best


def tutorial(size: int = 512, tile: int = 64, bk: int = 32):
    from tests.ops.test_dot import matmul_kernel
    a, b, c = torch.randn(size, size), torch.randn(size, size), torch.empty(size, size)
    grid = (size // tile, size // tile)

    def spine():
        matmul_kernel[grid](a, b, c, size, size, size, size, 1, size, 1, size, 1, BM=tile, BN=tile, BK=bk)
    spine()
    torch.testing.assert_close(c, a @ b, rtol=1e-4, atol=1e-4)
    return f"tutorial kernel {size}^3, {tile} x {tile} x {bk} tiles", spine, lambda: torch.matmul(a, b, out=c)


def linear(m: int, n: int, k: int):
    from spine.inductor.matmul import _block_sizes, matmul_kernel
    x, weight, bias = torch.randn(m, k), torch.randn(n, k), torch.randn(n)
    w = weight.t()
    out = torch.empty(m, n)
    bm, bn, bk = _block_sizes(m, n, k)
    grid = (triton.cdiv(m, bm), triton.cdiv(n, bn), 1)

    def spine():
        matmul_kernel[grid](x, w, bias, out, m, n, k, 1, 0, 0, x.stride(0), x.stride(1), 0, 0, w.stride(0),
                            w.stride(1), HAS_BIAS=True, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk)
    spine()
    torch.testing.assert_close(out, torch.addmm(bias, x, w), rtol=1e-4, atol=1e-4)
    return (f"linear layer x @ W^T + b, {m} x {k} @ {k} x {n}, {bm} x {bn} x {bk} blocks", spine,
            lambda: torch.addmm(bias, x, w))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    from spine.driver import CPUDriver
    triton.runtime.driver.set_active(CPUDriver(target="host"))
    torch.set_num_threads(1)
    cases = [tutorial()] + [linear(m, n, k) for m in (130, 264) for n, k in ((1536, 384), (384, 1536), (384, 384))]
    print("| kernel | Spine | torch | torch / Spine |")
    print("|---|---|---|---|")
    for name, spine, reference in cases:
        ours, theirs = best_per_call([spine, reference], args.rounds, 10)
        print(f"| {name} | {ours * 1e3:.2f} ms | {theirs * 1e3:.2f} ms | {theirs / ours:.2f} |", flush=True)


if __name__ == "__main__":
    main()
