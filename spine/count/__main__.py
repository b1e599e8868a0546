"""python -m spine.count path/to/file.py:kernel --signature "*fp32,*fp32,*fp32,i32" --constexpr BLOCK=1024
    --grid 4 [--cpu rv64,v=true,vlen=128] [--args-from file.py:function] [--json]"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys

from .. import switches
from ..errors import KernelFault, SpineCompilationError


INT32_MAX = 2**31 - 1      # a grid dimension and a made-up integer argument are i32 in the kernel
# Every instruction of every program passes through QEMU's log and this process, about 130,000 a second
# (measured here): 2**20 programs of a 200-instruction add already trace for half an hour.
MAX_PROGRAMS = 1 << 20


def _bounded_int(text: str, what: str, high: int = INT32_MAX) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: {what} must be an integer") from None
    if not 1 <= value <= high:
        raise argparse.ArgumentTypeError(f"{text!r}: {what} must be between 1 and {high:,}")
    return value


def _grid(text: str) -> tuple:
    parts = text.split(",")
    if not 1 <= len(parts) <= 3:
        raise argparse.ArgumentTypeError(f"{text!r}: expected N, N,M or N,M,K")
    sizes = tuple(_bounded_int(part.strip(), "a grid size") for part in parts) + (1,) * (3 - len(parts))
    if sizes[0] * sizes[1] * sizes[2] > MAX_PROGRAMS:
        raise argparse.ArgumentTypeError(f"{text!r}: {sizes[0] * sizes[1] * sizes[2]:,} programs; counting "
                                         f"traces at most {MAX_PROGRAMS:,}")
    return sizes


def _numel(text: str) -> int:
    return _bounded_int(text, "--numel")


def _name_and_value(text: str) -> str:
    """NAME=VALUE, checked here so that a typo is reported before the kernel compiles."""
    from ..aot.signature import SignatureError, parse_constexpr
    try:
        parse_constexpr(text)
    except SignatureError as err:
        raise argparse.ArgumentTypeError(str(err).removeprefix("--constexpr ")) from None
    return text


def _signature(text: str) -> str:
    from ..aot.signature import SignatureError, parse_type
    try:
        for part in (t for t in text.split(",") if t.strip()):
            parse_type(part)
    except SignatureError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text


def _file_and_name(what: str):
    def check(text: str) -> str:
        path, sep, name = text.rpartition(":")
        if not sep or not path or not name.isidentifier():
            raise argparse.ArgumentTypeError(f"{text!r}: expected path/to/file.py:{what}")
        if not os.path.isfile(path):
            raise argparse.ArgumentTypeError(f"{text!r}: {path}: no such file")
        return text
    return check


def _qemu_cpu(text: str) -> str:
    # Passed to QEMU as one argument: a model name and comma-separated properties, nothing else.
    if not re.fullmatch(r"[A-Za-z0-9_.-]+(,[A-Za-z0-9_.-]+(=[A-Za-z0-9_.-]+)?)*", text):
        raise argparse.ArgumentTypeError(f"{text!r}: expected a QEMU -cpu string, e.g. "
                                         f"{switches.QEMU_CPU.default}")
    return text


def _program_id(index: int, grid: tuple) -> tuple:
    return index % grid[0], index // grid[0] % grid[1], index // (grid[0] * grid[1])


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="python -m spine.count",
        description="Compile a @triton.jit kernel for riscv64, launch it once under QEMU on the chosen core "
                    "and print the guest instructions it executed (in total, per program instance, and the "
                    "vector share). Counts are deterministic.")
    parser.add_argument("kernel", type=_file_and_name("kernel_name"),
                        help="path/to/file.py:kernel_name (the file is executed)")
    parser.add_argument("--signature", "-s", type=_signature, required=True,
                        help="run-time argument types, as for spine.aot")
    parser.add_argument("--constexpr", "-c", type=_name_and_value, action="append", default=[],
                        metavar="NAME=VALUE")
    parser.add_argument("--grid", "-g", type=_grid, required=True, help="N, N,M or N,M,K")
    parser.add_argument("--cpu", type=_qemu_cpu, default=None,
                        help=f"QEMU -cpu string (default: SPINE_QEMU_CPU, {switches.QEMU_CPU.default})")
    parser.add_argument("--args-from", type=_file_and_name("function"), metavar="FILE.py:FUNCTION",
                        help="a function returning the run-time arguments (tensors, scalars) in order")
    parser.add_argument("--numel", type=_numel, default=4096,
                        help="without --args-from: elements of each tensor, and each integer's value")
    parser.add_argument("--scalar", type=_name_and_value, action="append", default=[], metavar="NAME=VALUE",
                        help="without --args-from: a scalar argument's value")
    parser.add_argument("--json", action="store_true", help="print the counts as JSON")
    return parser.parse_args(argv)


def count(args):
    """(kernel name, LaunchCount) of one launch as `args` describe it."""
    import triton

    from ..aot.compile import load_kernel, triton_compile
    from ..aot.signature import kernel_signature
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
        values = made_up_arguments(sig.params, args.numel, _scalars(sig.params, args.scalar))
    if len(values) != len(sig.params):
        raise ValueError(f"{len(values)} arguments for {len(sig.params)} run-time parameters")
    by_name = {p.name: v for p, v in zip(sig.params, values)}
    all_values = [by_name.get(name, sig.constexprs.get(name)) for name in kernel.arg_names]

    def launch():
        compiled[args.grid](*all_values)
        return compiled
    counted = count_launch(launch, args.cpu)
    return compiled.metadata.name, counted


def _scalars(params, texts: list) -> dict:
    from ..aot.signature import parse_constexpr
    scalars = dict(parse_constexpr(s) for s in texts)
    by_name = {p.name: p for p in params}
    for name in scalars:
        if name not in by_name or by_name[name].is_pointer:
            raise ValueError(f"--scalar {name}: not a scalar run-time parameter of the kernel (those are: "
                             f"{', '.join(p.name for p in params if not p.is_pointer) or 'none'})")
    return scalars


def report(name: str, args, counted) -> str:
    cpu = args.cpu or switches.QEMU_CPU.get()
    consts = ", ".join(args.constexpr)
    per = counted.per_program
    lines = [f"kernel {name}{f' ({consts})' if consts else ''}, grid {args.grid}, QEMU -cpu {cpu}",
             f"guest instructions: {counted.total:,} in {len(per)} programs",
             f"vector instructions: {counted.vector:,} ({counted.vector_share:.1%})"]
    x60 = counted.x60
    if x60 is not None:
        lines.append(f"estimated cycles on SpacemiT's X60: {x60.cycles:,.0f} (bound by {x60.bound_by}; LLVM's "
                     f"scheduling model, throughput only: spine/count/cycles.py)")
        if x60.macs:
            lines.append(f"multiply-accumulates: {x60.macs:,} ({x60.macs / counted.total:.2f} per instruction, "
                         f"{x60.macs / x60.cycles:.1f} per estimated cycle)")
    if per:
        lines.append(f"per program: min {min(per):,}, median {statistics.median(per):,.0f}, max {max(per):,}")
    for i, n in enumerate(per[:16]):
        lines.append(f"  program {_program_id(i, args.grid)}: {n:,}")
    if len(per) > 16:
        lines.append(f"  ... {len(per) - 16} more (--json lists all)")
    return "\n".join(lines)


def _x60_json(x60) -> dict:
    if x60 is None:
        return {}
    return {"x60_cycles": round(x60.cycles, 1), "x60_bound_by": x60.bound_by, "macs": x60.macs,
            "x60_busy": {r: round(c, 1) for r, c in x60.busy.items()}, "classes": x60.classes}


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        name, counted = count(args)
    except (ValueError, OSError) as err:
        print(f"spine.count: {err}", file=sys.stderr)
        return 2
    except (KernelFault, SpineCompilationError) as err:   # e.g. a --cpu model QEMU does not know
        print(f"spine.count: {err}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({"kernel": name, "grid": list(args.grid), "cpu": args.cpu or switches.QEMU_CPU.get(),
                          "total": counted.total, "vector": counted.vector,
                          "per_program": list(counted.per_program), **_x60_json(counted.x60)}))
    else:
        print(report(name, args, counted))
    return 0


if __name__ == "__main__":
    sys.exit(main())
