"""Matmul on SpacemiT's matrix units against their vector code, by deterministic guest instruction counts
under QEMU (`spine.count`): the tutorial's tiled matmul, int8 in and int32 out (K1's `spacemit-x60`, or K3's
`spacemit-a100`), or fp16 in and fp32 out (`spacemit-a100`), compiled with SPINE_MATRIX_UNIT on (smt.vmadot /
smt.vfwmadot, emulated by the kernel server under QEMU: its instructions are not the kernel's and are not
counted) and off (RVV), each result checked against torch.

    .venv/bin/python bench/matrix_unit.py [--size 256] [--blocks 64,64,256] [--core spacemit-a100 --dtype fp16]

Prints instructions and estimated X60 cycles (spine/count/cycles.py: LLVM's scheduling model, throughput
only) per 1,000 multiply-accumulates for both, the multiply-accumulates the instructions did (padding
included), and the ratios. Counting traces every guest instruction: minutes at 256 (SPINE_KERNEL_TIMEOUT
is raised for it)."""
from __future__ import annotations

import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")


def count(size: int, blocks: tuple, dtype: str):
    """One launch's LaunchCount, in this process (its switches are set by the caller's environment)."""
    sys.path.insert(0, ROOT)
    import torch
    import triton

    from spine.count import count_launch
    from spine.driver import CPUDriver
    from tests.ops.test_matrix_unit_a100 import _launch
    triton.runtime.driver.set_active(CPUDriver("riscv64"))
    gen = torch.Generator().manual_seed(0)
    if dtype == "int8":
        a = torch.randint(-128, 128, (size, size), dtype=torch.int8, generator=gen)
        b = torch.randint(-128, 128, (size, size), dtype=torch.int8, generator=gen)
        c, expected = torch.empty(size, size, dtype=torch.int32), a.int() @ b.int()
    else:
        a = torch.randn(size, size, generator=gen).half()
        b = torch.randn(size, size, generator=gen).half()
        c, expected = torch.empty(size, size), (a.double() @ b.double()).float()
    n = count_launch(lambda: _launch(a, b, c, blocks))
    if not torch.allclose(c, expected, rtol=1e-5, atol=1e-3 if dtype == "fp16" else 0):
        raise SystemExit("wrong result")
    return n


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--blocks", default="64,64,256", help="BM,BN,BK")
    parser.add_argument("--core", default="spacemit-x60", choices=("spacemit-x60", "spacemit-a100"))
    parser.add_argument("--dtype", default="int8", choices=("int8", "fp16"))
    parser.add_argument("--one", choices=("0", "1"), help=argparse.SUPPRESS)   # a child: count one mode
    args = parser.parse_args(argv)
    blocks = tuple(int(x) for x in args.blocks.split(","))
    if args.dtype == "fp16" and args.core != "spacemit-a100":
        parser.error("fp16 products run on a matrix unit only on spacemit-a100")
    if args.one is not None:
        counted = count(args.size, blocks, args.dtype)
        print(counted.total, round(counted.x60.cycles), counted.x60.macs)
        return
    macs = args.size ** 3
    counts = {}
    for mode in ("1", "0"):   # a process each: the mode is a compile switch read at start-up
        env = dict(os.environ, SPINE_TARGET="riscv64", SPINE_RISCV_CPU=args.core, SPINE_MATRIX_UNIT=mode,
                   SPINE_KERNEL_TIMEOUT=os.environ.get("SPINE_KERNEL_TIMEOUT", "5000"))
        out = subprocess.run([sys.executable, __file__, "--size", str(args.size), "--blocks", args.blocks,
                              "--core", args.core, "--dtype", args.dtype, "--one", mode], env=env, check=True,
                             capture_output=True, text=True).stdout
        total, cycles, done = (int(x) for x in out.split()[-3:])
        counts[mode] = (total, cycles)
        unit = "smt.vfwmadot" if args.dtype == "fp16" else "smt.vmadot"
        print(f"{unit if mode == '1' else 'RVV':>15}: {total:>11,} instructions, "
              f"{total / macs * 1000:6.1f} per 1,000 MACs; {cycles:>11,} estimated cycles, "
              f"{cycles / macs * 1000:6.1f} per 1,000 MACs; {done:,} MACs done", flush=True)
    print(f"{args.core} {args.dtype}, RVV / matrix unit: {counts['0'][0] / counts['1'][0]:.2f}x fewer instructions, "
          f"{counts['0'][1] / counts['1'][1]:.2f}x fewer estimated cycles on the matrix unit")


if __name__ == "__main__":
    main()
