"""CPULauncher: what triton calls for every launch of a compiled kernel."""
from __future__ import annotations

import re

from .arguments import Param, check_tensor, scalar_encoder

_TENSORDESC = re.compile(r"tensordesc<([^[>]*)\[([^]]*)\]")


def _tensordesc_params(name: str, ty: str) -> list[tuple[str, str]]:
    """The arguments a host TensorDescriptor becomes once triton's rewrite_tensor_descriptor_to_pointer
    pass ran: base pointer, shape (i64), strides (i64), NaN-padding flag, then the shape (i32) and strides
    (i64) the frontend appends for every descriptor."""
    match = _TENSORDESC.match(ty)
    dtype, rank = match.group(1), match.group(2).count(",") + 1
    return ([(f"{name}.base", "*" + dtype)] + [(f"{name}.shape{d}", "i64") for d in range(rank)]
            + [(f"{name}.stride{d}", "i64") for d in range(rank)] + [(f"{name}.padding_nan", "i1")]
            + [(f"{name}.shape{d}", "i32") for d in range(rank)] + [(f"{name}.stride{d}", "i64") for d in range(rank)])


def _tensordesc_values(name: str, kernel: str, desc) -> list:
    if not all(hasattr(desc, a) for a in ("base", "shape", "strides")):
        raise TypeError(f"argument '{name}' of kernel '{kernel}' expects a "
                        f"triton.tools.tensor_descriptor.TensorDescriptor, got {type(desc).__name__}")
    shape, strides = list(desc.shape), list(desc.strides)
    padding_nan = getattr(desc, "padding", "zero") == "nan"
    return [desc.base, *shape, *strides, padding_nan, *shape, *strides]


def runtime_params(src) -> tuple[list[Param], list[tuple[int, str, str]]]:
    """The kernel's runtime parameters in order (constexprs and ints specialised to 1 are compiled in),
    and for each Python argument that has any: (position, name, "plain" | "tensordesc")."""
    params, sources = [], []
    for position, (name, ty) in enumerate(src.signature.items()):
        if ty == "constexpr":
            continue
        if not isinstance(ty, str):
            raise ValueError(f"kernel argument '{name}' of type {ty} is not supported by Spine yet")
        if ty.startswith("tensordesc"):
            for pname, pty in _tensordesc_params(name, ty):
                params.append(Param(len(params), pname, pty))
            sources.append((position, name, "tensordesc"))
        else:
            params.append(Param(len(params), name, ty))
            sources.append((position, name, "plain"))
    return params, sources


class CPULauncher:

    def __init__(self, src, metadata):
        self.kernel_name = metadata.name
        self.params, self.sources = runtime_params(src)
        self.written = frozenset(getattr(metadata, "spine_written_args", ()))
        self.encoders = [None if p.is_pointer else scalar_encoder(p, self.kernel_name) for p in self.params]

    def _flat_arguments(self, args) -> list:
        flat = []
        for position, name, kind in self.sources:
            value = args[position]
            flat += _tensordesc_values(name, self.kernel_name, value) if kind == "tensordesc" else [value]
        return flat

    def __call__(self, gridX, gridY, gridZ, stream, function, packed_metadata, launch_metadata,
                 launch_enter_hook, launch_exit_hook, *args):
        values = []
        for param, value, encode in zip(self.params, self._flat_arguments(args), self.encoders):
            if encode is None:
                check_tensor(param, value, self.kernel_name)
                values.append(value)
            else:
                values.append(encode(value))
        if launch_enter_hook is not None:
            launch_enter_hook(launch_metadata)
        function.executor.run(function, (gridX, gridY, gridZ), self.params, values, self.written)
        if launch_exit_hook is not None:
            launch_exit_hook(launch_metadata)
