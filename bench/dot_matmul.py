"""tl.dot matmul kernels on the host against torch: the tutorial-shaped kernel the tests use
(tests/ops/test_dot.py, fp32, 512^3 and 1024^3 in several tiles; `make bench` runs 512^3 in 64 x 64 x 64
tiles), the same in int8 -> int32 (tests/ops/test_matrix_unit.py's, against torch._int_mm) and bf16 -> fp32
(against torch.mm in bf16: oneDNN, on AMX where the CPU has it), and the linear-layer kernel Inductor calls for MiniLM (spine/inductor/matmul.py: x @ W^T + bias
with W as nn.Linear keeps it, x of 130 and 264 rows, the tokens of bench/minilm.py's batches).

    .venv/bin/python bench/dot_matmul.py [--rounds N] [--threads T]

One process, T threads for torch and for Spine's grid (default 1); every kernel and torch run in turn,
a pause of 20 ms, one untimed call and 10 timed calls a side per round; each figure is the best round's time per call: the launching thread's CPU time
on one thread (time.thread_time, which another process on a shared machine disturbs least), wall time on
more. torch / Spine above 1: Spine is faster."""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402
import triton  # noqa: E402


def assert_within_summation_bound(c, a, b, bias=None) -> None:
    """c is a @ b (+ bias) in fp32 to within the worst case of any order of summation, K * 2^-23 times
    |a| @ |b| (+ |bias|) per element: a fixed tolerance fails on an element that cancels to near zero, and
    torch's and Spine's sums run in different orders (and differ again between thread counts)."""
    ref = a.double() @ b.double()
    scale = a.double().abs() @ b.double().abs()
    if bias is not None:
        ref, scale = ref + bias.double(), scale + bias.double().abs()
    excess = ((c.double() - ref).abs() - a.shape[1] * 2.0 ** -23 * scale).max().item()
    if excess > 0:
        raise AssertionError(f"Spine's product is off by more than fp32 summation allows (by {excess:g})")


def best_per_call(fns, rounds: int, calls: int, clock) -> list:
    best = [float("inf")] * len(fns)
    for _ in range(rounds):
        for i, fn in enumerate(fns):
            # On several threads, torch's OpenMP threads spin for some milliseconds after its calls and
            # keep Spine's grid worker off the second core (a small linear layer on two threads here:
            # 0.40 ms, its one-thread time, instead of 0.21 ms). Spine's idle threads yield the core.
            # A pause before each side's calls lets the other side's threads go to sleep.
            time.sleep(0.02)
            fn()
            start = clock()
            for _ in range(calls):
                fn()
            best[i] = min(best[i], (clock() - start) / calls)
    return best


def tutorial(size: int, tile: int, bk: int):
    from tests.ops.test_dot import matmul_kernel
    a, b, c = torch.randn(size, size), torch.randn(size, size), torch.empty(size, size)
    grid = (size // tile, size // tile)

    def spine():
        matmul_kernel[grid](a, b, c, size, size, size, size, 1, size, 1, size, 1, BM=tile, BN=tile, BK=bk)
    spine()
    assert_within_summation_bound(c, a, b)
    return f"tutorial kernel {size}^3, {tile} x {tile} x {bk} tiles", spine, lambda: torch.matmul(a, b, out=c)


TUTORIAL_TILES = {512: [(64, 32), (64, 64), (128, 64)], 1024: [(64, 64), (128, 64)]}
NARROW_TILES = [(64, 256), (128, 128)]       # int8 and bf16: (tile, BK)


def narrow(dtype: torch.dtype, size: int, tile: int, bk: int):
    """The tutorial kernel on int8 (exact against torch._int_mm) or bf16 inputs (fp32 sums, checked as fp32)."""
    from tests.ops.test_dot import matmul_kernel as float_kernel
    from tests.ops.test_matrix_unit import matmul_kernel as int_kernel
    if dtype == torch.int8:
        a, b = (torch.randint(-128, 128, (size, size), dtype=torch.int8) for _ in range(2))
        c, kernel, reference = torch.empty(size, size, dtype=torch.int32), int_kernel, lambda: torch._int_mm(a, b)
    else:
        a, b = (torch.randn(size, size).bfloat16() for _ in range(2))
        c, kernel, reference = torch.empty(size, size), float_kernel, lambda: torch.mm(a, b)
    grid = (size // tile, size // tile)

    def spine():
        kernel[grid](a, b, c, size, size, size, size, 1, size, 1, size, 1, BM=tile, BN=tile, BK=bk)
    spine()
    if dtype == torch.int8:
        assert torch.equal(c, torch._int_mm(a, b)), "Spine's int8 product is wrong"
    else:
        assert_within_summation_bound(c, a.float(), b.float())
    name = "int8 -> int32" if dtype == torch.int8 else "bf16 -> fp32"
    return f"tutorial kernel {name} {size}^3, {tile} x {tile} x {bk} tiles", spine, reference


def linear(m: int, n: int, k: int):
    from spine.inductor.matmul import _block_sizes, matmul_kernel
    x, weight, bias = torch.randn(m, k), torch.randn(n, k), torch.randn(n)
    w = weight.t()
    out = torch.empty(m, n)
    bm, bn, bk = _block_sizes(m, n, k)
    grid = (triton.cdiv(m, bm), triton.cdiv(n, bn), 1)

    def spine():
        matmul_kernel[grid](x, w, bias, out, m, n, k, 1, 0, 0, x.stride(0), x.stride(1), 0, 0, w.stride(0),
                            w.stride(1), 0, 0, out.stride(0), HAS_BIAS=True, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk)
    spine()
    assert_within_summation_bound(out, x, w, bias)
    return (f"linear layer x @ W^T + b, {m} x {k} @ {k} x {n}, {bm} x {bn} x {bk} blocks", spine,
            lambda: torch.addmm(bias, x, w))


def _instruction_sets() -> str:
    """What the host target's products run on: the micro-kernel's instructions, and its matrix unit's."""
    from spine.microkernels import MICROKERNELS, choose
    from spine.targets import host_target
    target = host_target()
    kernel = choose(target.triple, target.cpu, target.features)
    units = {MICROKERNELS[name].isa for name in (kernel.int8, kernel.bf16) if name}
    return f"{target.cpu}: " + "; ".join([kernel.isa] + sorted(units))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    os.environ["SPINE_NUM_THREADS"] = str(args.threads)
    from spine.driver import CPUDriver
    triton.runtime.driver.set_active(CPUDriver(target="host"))
    torch.set_num_threads(args.threads)
    clock = time.thread_time if args.threads == 1 else time.perf_counter
    cases = [tutorial(size, tile, bk) for size, tiles in TUTORIAL_TILES.items() for tile, bk in tiles]
    cases += [narrow(dtype, size, tile, bk) for dtype in (torch.int8, torch.bfloat16) for size in (512, 1024)
              for tile, bk in NARROW_TILES]
    cases += [linear(m, n, k) for m in (130, 264) for n, k in ((1536, 384), (384, 1536), (384, 384))]
    print(f"Spine's micro-kernel here: {_instruction_sets()}")
    print(f"| kernel ({args.threads} thread{'s' if args.threads > 1 else ''}) | Spine | torch | torch / Spine |")
    print("|---|---|---|---|")
    for name, spine, reference in cases:
        ours, theirs = best_per_call([spine, reference], args.rounds, 10, clock)
        print(f"| {name} | {ours * 1e3:.2f} ms | {theirs * 1e3:.2f} ms | {theirs / ours:.2f} |", flush=True)


if __name__ == "__main__":
    main()
