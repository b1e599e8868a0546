"""python -m spine.count path/to/file.py:kernel --signature "*fp32,*fp32,*fp32,i32" --constexpr BLOCK=1024
    --grid 4 [--cpu rv64,v=true,vlen=128] [--args-from file.py:function] [--json]"""
from __future__ import annotations

import argparse
import json
import statistics
import sys

from .. import switches


def _grid(text: str) -> tuple:
    sizes = [int(v) for v in text.split(",")]
    if not 1 <= len(sizes) <= 3 or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected N, N,M or N,M,K (positive)")
    return tuple(sizes) + (1,) * (3 - len(sizes))


def _program_id(index: int, grid: tuple) -> tuple:
    return index % grid[0], index // grid[0] % grid[1], index // (grid[0] * grid[1])


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="python -m spine.count",
        description="Compile a @triton.jit kernel for riscv64, launch it once under QEMU on the chosen core "
                    "and print the guest instructions it executed (in total, per program instance, and the "
                    "vector share). Counts are deterministic.")
    parser.add_argument("kernel", help="path/to/file.py:kernel_name (the file is executed)")
    parser.add_argument("--signature", "-s", required=True, help="run-time argument types, as for spine.aot")
    parser.add_argument("--constexpr", "-c", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--grid", "-g", type=_grid, required=True, help="N, N,M or N,M,K")
    parser.add_argument("--cpu", default=None, help=f"QEMU -cpu string (default: SPINE_QEMU_CPU, "
                                                    f"{switches.QEMU_CPU.default})")
    parser.add_argument("--args-from", metavar="FILE.py:FUNCTION",
                        help="a function returning the run-time arguments (tensors, scalars) in order")
    parser.add_argument("--numel", type=int, default=4096,
                        help="without --args-from: elements of each tensor, and each integer's value")
    parser.add_argument("--scalar", action="append", default=[], metavar="NAME=VALUE",
                        help="without --args-from: a scalar argument's value")
    parser.add_argument("--json", action="store_true", help="print the counts as JSON")
    return parser.parse_args(argv)


def count(args):
    """(kernel name, LaunchCount) of one launch as `args` describe it."""
    import triton

    from ..aot.compile import load_kernel, triton_compile
    from ..aot.signature import kernel_signature, parse_constexpr
    from ..driver import CPUDriver
    from . import count_launch
    from .arguments import arguments_from, made_up_arguments

    triton.runtime.driver.set_active(CPUDriver(target="riscv64"))
    kernel = load_kernel(args.kernel)
    sig = kernel_signature(kernel, args.signature, args.constexpr)
    compiled, _ = triton_compile(kernel, sig, "riscv64")
    if args.args_from:
        values = arguments_from(args.args_from)
    else:
        values = made_up_arguments(sig.params, args.numel, dict(parse_constexpr(s) for s in args.scalar))
    if len(values) != len(sig.params):
        raise ValueError(f"{len(values)} arguments for {len(sig.params)} run-time parameters")
    by_name = {p.name: v for p, v in zip(sig.params, values)}
    all_values = [by_name.get(name, sig.constexprs.get(name)) for name in kernel.arg_names]

    def launch():
        compiled[args.grid](*all_values)
        return compiled
    counted = count_launch(launch, args.cpu)
    return compiled.metadata.name, counted


def report(name: str, args, counted) -> str:
    cpu = args.cpu or switches.QEMU_CPU.get()
    consts = ", ".join(args.constexpr)
    per = counted.per_program
    lines = [f"kernel {name}{f' ({consts})' if consts else ''}, grid {args.grid}, QEMU -cpu {cpu}",
             f"guest instructions: {counted.total:,} in {len(per)} programs",
             f"vector instructions: {counted.vector:,} ({counted.vector_share:.1%})"]
    if per:
        lines.append(f"per program: min {min(per):,}, median {statistics.median(per):,.0f}, max {max(per):,}")
    for i, n in enumerate(per[:16]):
        lines.append(f"  program {_program_id(i, args.grid)}: {n:,}")
    if len(per) > 16:
        lines.append(f"  ... {len(per) - 16} more (--json lists all)")
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        name, counted = count(args)
    except ValueError as err:
        print(f"spine.count: {err}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"kernel": name, "grid": list(args.grid), "cpu": args.cpu or switches.QEMU_CPU.get(),
                          "total": counted.total, "vector": counted.vector,
                          "per_program": list(counted.per_program)}))
    else:
        print(report(name, args, counted))
    return 0


if __name__ == "__main__":
    sys.exit(main())
