"""CPULauncher: what triton calls for every launch of a compiled kernel."""
from __future__ import annotations

from .arguments import Param, check_tensor, scalar_encoder


def runtime_params(src) -> list[Param]:
    """The kernel's runtime parameters, in order: constexprs (and ints specialised to 1) are compiled in."""
    signature = src.signature
    names = list(signature.keys())
    params = []
    for name in names:
        ty = signature[name]
        if ty == "constexpr":
            continue
        if not isinstance(ty, str):
            raise ValueError(f"kernel argument '{name}' of type {ty} is not supported by Spine yet")
        params.append(Param(len(params), name, ty))
    return params


class CPULauncher:

    def __init__(self, src, metadata):
        self.kernel_name = metadata.name
        self.params = runtime_params(src)
        self.arg_positions = [i for i, ty in enumerate(src.signature.values()) if ty != "constexpr"]
        self.written = frozenset(getattr(metadata, "spine_written_args", ()))
        self.encoders = [None if p.is_pointer else scalar_encoder(p, self.kernel_name) for p in self.params]

    def __call__(self, gridX, gridY, gridZ, stream, function, packed_metadata, launch_metadata,
                 launch_enter_hook, launch_exit_hook, *args):
        values = []
        for param, position, encode in zip(self.params, self.arg_positions, self.encoders):
            value = args[position]
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
