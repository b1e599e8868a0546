"""The tutorial's fp32 matmul on riscv64 (RVV's FMA kernel) by deterministic guest instruction counts under
QEMU: the kernel's own instructions and those it runs outside its .so (the grid runtime, kept panels,
libm), in a launch on a fresh kernel server and in the launch after it, whose runtime state (threads,
kept-panel buffers) is warm, as in a process that launches the kernel again and again.

    .venv/bin/python bench/matmul_count.py [--size 256] [--blocks 64,64,64]

The kernel's figure is what `python -m spine.count` reports; the runtime's is what it leaves out. Run it
in two trees to compare them (the counts do not depend on the host). Each result is checked against torch."""
from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def _split(counts: dict, text: tuple) -> tuple:
    lo, hi = text
    inside = sum(n for pc, n in counts.items() if lo <= pc < hi)
    return inside, sum(counts.values()) - inside


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--blocks", default="64,64,64", help="BM,BN,BK")
    args = parser.parse_args(argv)
    os.environ["SPINE_TARGET"] = "riscv64"
    os.environ.setdefault("SPINE_KERNEL_TIMEOUT", "5000")     # every instruction is logged
    sys.path.insert(0, ROOT)
    import torch
    import triton

    from spine.count import executed_addresses
    from spine.driver import CPUDriver
    from tests.ops.test_dot import matmul_kernel
    triton.runtime.driver.set_active(CPUDriver("riscv64"))
    size, (bm, bn, bk) = args.size, (int(x) for x in args.blocks.split(","))
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(size, size, generator=gen), torch.randn(size, size, generator=gen)
    c = torch.empty(size, size)

    def launch():
        c.zero_()
        return matmul_kernel[(triton.cdiv(size, bm), triton.cdiv(size, bn))](
            a, b, c, size, size, size, *a.stride(), *b.stride(), *c.stride(), BM=bm, BN=bn, BK=bk)

    def twice():
        launch()
        return launch()
    launch()                                                  # compiled before counting
    counts, text, _ = executed_addresses(launch)
    first = _split(counts, text)
    counts, text, _ = executed_addresses(twice)
    both = _split(counts, text)
    torch.testing.assert_close(c, a @ b, rtol=1e-4, atol=1e-3)
    second = (both[0] - first[0], both[1] - first[1])
    print(f"fp32 {size}^3 in {bm}x{bn}x{bk} tiles, riscv64 guest instructions (kernel + outside = all):")
    for name, (inside, outside) in (("first launch", first), ("next launch", second)):
        print(f"  {name:>12}: {inside:>11,} + {outside:>9,} = {inside + outside:>11,}")


if __name__ == "__main__":
    main()
