"""python -m spine.aot path/to/file.py:kernel --signature "*fp32,*fp32,*fp32,i32" --constexpr BLOCK=1024"""
from __future__ import annotations

import argparse
import os
import sys

from . import compile_kernel
from .signature import SignatureError


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m spine.aot",
        description="Compile a @triton.jit kernel ahead of time into lib<name>.so and <name>.h: one C "
                    "function, int name(args..., int grid_x, int grid_y, int grid_z), returning 0 or an "
                    "error code; the library needs nothing of Python or Spine.")
    parser.add_argument("kernel", help="path/to/file.py:kernel_name (the file is executed)")
    parser.add_argument("--signature", "-s", required=True,
                        help="types of the run-time arguments in order, e.g. '*fp32:16,*fp32,i32' "
                             "(':16': divisible by 16)")
    parser.add_argument("--constexpr", "-c", action="append", default=[], metavar="NAME=VALUE",
                        help="a constexpr's value (repeat for each)")
    parser.add_argument("--target", "-t", default="riscv64", help="riscv64 (default) or host")
    parser.add_argument("--name", "-n", help="the C function and library name (default: the kernel's)")
    parser.add_argument("--out-dir", "-o", default=".", help="where lib<name>.so and <name>.h go")
    args = parser.parse_args(argv)
    try:
        built = compile_kernel(args.kernel, args.signature, args.constexpr, args.target, args.name,
                               args.out_dir)
    except (SignatureError, ValueError, FileNotFoundError) as err:
        print(f"spine.aot: {err}", file=sys.stderr)
        return 2
    print(f"{built.library} ({os.path.getsize(built.library)} bytes)\n{built.header}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
