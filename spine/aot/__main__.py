"""python -m spine.aot path/to/file.py:kernel --signature "*fp32,*fp32,*fp32,i32" --constexpr BLOCK=1024
    [more kernels, each followed by its own --signature, --constexpr and --name] [--library NAME]"""
from __future__ import annotations

import argparse
import os
import sys

from . import KernelSpec, compile_library
from .signature import SignatureError

# Options that belong to the kernel named before them; every other option is the library's.
_KERNEL_OPTIONS = {"-s": "signature", "--signature": "signature", "-c": "constexprs", "--constexpr": "constexprs",
                   "-n": "name", "--name": "name"}
_LIBRARY_OPTIONS_WITH_VALUE = {"-t", "--target", "-o", "--out-dir", "-l", "--library"}

DESCRIPTION = """\
Compile @triton.jit kernels ahead of time into lib<library>.so and <library>.h: one C function per kernel,
int name(args..., int grid_x, int grid_y, int grid_z), returning 0 or an error code. The library needs
nothing of Python or Spine. Each kernel is given as path/to/file.py:kernel_name (the file is executed),
followed by its own options:
  --signature, -s TYPES   types of its run-time arguments in order, e.g. '*fp32:16,*fp32,i32'
                          (':16': divisible by 16)
  --constexpr, -c N=V     a constexpr's value (repeat for each)
  --name, -n NAME         its C function's name (default: the kernel's)"""


def _library_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m spine.aot", description=DESCRIPTION,
                                     usage="%(prog)s KERNEL --signature TYPES [--constexpr N=V ...] [--name NAME] "
                                           "[KERNEL ...] [--target T] [--library NAME] [--out-dir DIR]",
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", "-t", default="riscv64", help="riscv64 (default) or host")
    parser.add_argument("--library", "-l", help="the library's name (default: the C name of its only kernel)")
    parser.add_argument("--out-dir", "-o", default=".", help="where lib<library>.so and <library>.h go")
    return parser


def split_arguments(argv: list[str]) -> tuple[list[str], list[KernelSpec]]:
    """The library's options, and a KernelSpec for each kernel with the options that followed it (those
    before the first kernel are the first kernel's)."""
    library, kernels = [], []
    pending = KernelSpec(None, None)   # options given before the first kernel
    i = 0
    while i < len(argv):
        token = argv[i]
        option, has_value, value = token.partition("=")
        if option in _KERNEL_OPTIONS:
            if not has_value:
                if i + 1 == len(argv):
                    raise SignatureError(f"{option} needs a value")
                value, i = argv[i + 1], i + 1
            spec, key = kernels[-1] if kernels else pending, _KERNEL_OPTIONS[option]
            if key == "constexprs":
                spec.constexprs.append(value)
            else:
                setattr(spec, key, value)
        elif token.startswith("-"):
            library.append(token)
            if option in _LIBRARY_OPTIONS_WITH_VALUE and not has_value and i + 1 < len(argv):
                library.append(argv[i + 1])
                i += 1
        else:
            spec = pending if not kernels else KernelSpec(None, None)
            spec.kernel = token
            kernels.append(spec)
        i += 1
    for spec in kernels:
        if spec.signature is None:
            raise SignatureError(f"{spec.kernel}: give its --signature")
    return library, kernels


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = _library_parser()
    try:
        library_args, kernels = split_arguments(argv)
        args = parser.parse_args(library_args)
        if not kernels:
            parser.error("give at least one kernel (path/to/file.py:kernel_name)")
        built = compile_library(kernels, args.target, args.library, args.out_dir)
    except (SignatureError, ValueError, FileNotFoundError) as err:
        print(f"spine.aot: {err}", file=sys.stderr)
        return 2
    print(f"{built.library} ({os.path.getsize(built.library)} bytes)\n{built.header}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
