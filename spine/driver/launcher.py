"""CPULauncher: what triton calls for every launch of a compiled kernel."""
from __future__ import annotations

import re
from dataclasses import dataclass, fields

from ..errors import DeviceAssertionError, OutOfBoundsError
from .arguments import Param, byte_range, check_tensor, element_extent, extent_params, scalar_encoder, unwrap_tensor

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


@dataclass(frozen=True)
class ArgumentSource:
    """Where a runtime parameter's value comes from: a Python argument, inside nested tuples by `path`."""
    position: int
    path: tuple
    name: str
    kind: str          # "plain" or "tensordesc" (which becomes several parameters)

    def value(self, args):
        value = args[self.position]
        for index in self.path:
            value = value[index]
        return value


def _leaves(name: str, ty, path=()):
    """(name, type, path) of every non-tuple element of a possibly nested tuple argument, in order (the
    order the frontend flattens tuples into kernel parameters)."""
    if isinstance(ty, tuple):
        for i, element in enumerate(ty):
            yield from _leaves(f"{name}[{i}]", element, path + (i,))
    else:
        yield name, ty, path


def runtime_params(src) -> tuple[list[Param], list[ArgumentSource]]:
    """The kernel's runtime parameters in order (constexprs and ints specialised to 1 are compiled in),
    and where each comes from."""
    params, sources = [], []
    for position, (argument, argument_type) in enumerate(src.signature.items()):
        for name, ty, path in _leaves(argument, argument_type):
            if ty == "constexpr":
                continue
            if not isinstance(ty, str):
                raise ValueError(f"kernel argument '{name}' of type {ty} is not supported by Spine yet")
            if ty.startswith("tensordesc"):
                for pname, pty in _tensordesc_params(name, ty):
                    params.append(Param(len(params), pname, pty))
                sources.append(ArgumentSource(position, path, name, "tensordesc"))
            else:
                params.append(Param(len(params), name, ty))
                sources.append(ArgumentSource(position, path, name, "plain"))
    return params, sources


class CPULauncher:

    def __init__(self, src, metadata):
        self.src = src
        self.metadata = metadata
        self.kernel_name = metadata.name
        self.params, self.sources = runtime_params(src)
        self.written = frozenset(getattr(metadata, "spine_written_args", ()))
        self.read_in_place = tuple(getattr(metadata, "spine_direct_load_args", ()))
        self.encoders = [None if p.is_pointer else scalar_encoder(p, self.kernel_name) for p in self.params]
        # A bounds-checked kernel (debug) takes each pointer argument's extent after its own arguments.
        self.extents = extent_params(self.params) if getattr(metadata, "spine_bounds_checked", False) else []
        self._alias_safe_kernel = None

    def _overlaps_written_memory(self, values) -> bool:
        """Whether an argument the kernel reads in place shares bytes with one it writes."""
        written = [byte_range(values[i]) for i in self.written]
        for i in self.read_in_place:
            lo, hi = byte_range(values[i])
            if any(lo < w_hi and w_lo < hi for w_lo, w_hi in written):
                return True
        return False

    def _alias_safe(self):
        """The variant of this kernel that copies every loaded tile, compiled on first need."""
        if self._alias_safe_kernel is None:
            import triton
            from ..options import CPUOptions
            options = {f.name: getattr(self.metadata, f.name) for f in fields(CPUOptions)
                       if hasattr(self.metadata, f.name)}
            options["alias_safe"] = True
            kernel = triton.compile(self.src, target=self.metadata.target, options=options)
            kernel._init_handles()
            self._alias_safe_kernel = kernel
        return self._alias_safe_kernel

    def _flat_arguments(self, args) -> list:
        flat = []
        for source in self.sources:
            value = source.value(args)
            flat += _tensordesc_values(source.name, self.kernel_name, value) if source.kind == "tensordesc" \
                else [value]
        return flat

    def __call__(self, gridX, gridY, gridZ, stream, function, packed_metadata, launch_metadata,
                 launch_enter_hook, launch_exit_hook, *args):
        values = []
        for param, value, encode in zip(self.params, self._flat_arguments(args), self.encoders):
            if encode is None:
                value = unwrap_tensor(value)
                check_tensor(param, value, self.kernel_name)
                values.append(value)
            else:
                values.append(encode(value))
        if self.read_in_place and self.written and self._overlaps_written_memory(values):
            function = self._alias_safe().function
        params = self.params
        if self.extents:
            values += [element_extent(p, values[p.index]) for p in self.params if p.is_pointer]
            params = self.params + self.extents
        if launch_enter_hook is not None:
            launch_enter_hook(launch_metadata)
        try:
            function.executor.run(function, (gridX, gridY, gridZ), params, values, self.written)
        except DeviceAssertionError as failure:
            error = OutOfBoundsError.recognise(failure)
            if error is failure:
                raise
            raise error from None
        if launch_exit_hook is not None:
            launch_exit_hook(launch_metadata)
