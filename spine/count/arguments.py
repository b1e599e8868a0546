"""The arguments of a counted launch: from a Python function (`--args-from file.py:function`, returning
the run-time arguments in signature order), or made up: each pointer a tensor of `--numel` seeded random
elements of its type, each integer `--numel`, each float 1.0, unless `--scalar NAME=VALUE` says."""
from __future__ import annotations

import importlib.util
import os
import sys

_DTYPES = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32", "fp64": "float64", "i1": "bool",
           "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64", "u8": "uint8", "u16": "uint16",
           "u32": "uint32", "u64": "uint64", "u1": "bool"}


def arguments_from(spec: str) -> list:
    path, sep, name = spec.rpartition(":")
    if not sep:
        raise ValueError(f"--args-from {spec!r}: expected path/to/file.py:function")
    path = os.path.abspath(path)
    sys.path.insert(0, os.path.dirname(path))
    module_spec = importlib.util.spec_from_file_location("spine_count_args", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    function = getattr(module, name, None)
    if not callable(function):
        raise ValueError(f"--args-from {spec!r}: {path} defines no function {name!r}")
    return list(function())


def made_up_arguments(params, numel: int, scalars: dict) -> list:
    import torch
    generator = torch.Generator().manual_seed(0)
    values = []
    for p in params:
        if p.name in scalars:
            values.append(scalars[p.name])
        elif p.is_pointer:
            dtype = getattr(torch, _DTYPES.get(p.type[1:], "uint8"))
            if dtype.is_floating_point:
                values.append(torch.randn(numel, generator=generator).to(dtype))
            elif dtype == torch.bool:
                values.append(torch.randint(0, 2, (numel,), generator=generator).bool())
            else:
                values.append(torch.randint(0, 100, (numel,), generator=generator).to(dtype))
        elif p.type.startswith(("fp", "bf")):
            values.append(1.0)
        else:
            values.append(numel)
    return values
