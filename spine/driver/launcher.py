"""What triton calls for every launch of a compiled kernel.

`make_launcher` (the driver's `launcher_cls`) gives triton a DirectLauncher from the host launch fast path
(cpp/launch.cpp) where the kernel's parameters allow it: it encodes the arguments and runs the grid in C++
and hands anything unusual to the CPULauncher below, which does everything in Python: checks, tensor
wrappers, tensor descriptors and tuples, the alias-safe variant, launch hooks, profiling."""
from __future__ import annotations

import functools
import math
import operator
import platform
import re
import warnings
from dataclasses import dataclass, fields

from ..errors import DeviceAssertionError, OutOfBoundsError
from ..kernel_facts import UNTRACED_ADDRESS, KernelFacts
from .arguments import (POINTEE_BYTES, SUPPORTED_POINTEE, Arguments, Param, byte_range, check_tensor, element_extent, extent_params,
                        scalar_encoder, unwrap_tensor)
from . import graph
from .executor import executor_for
from .settings import runtime_settings

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


_MAX_GRID_DIM = 2**31 - 1      # program ids are int32 in every dimension, as on GPUs
_MAX_PROGRAMS = 2**62          # the grid runtime's bound (cpp/grid.h, SPINE_GRID_TOO_LARGE)


def checked_grid(grid, kernel: str) -> tuple[int, int, int]:
    """The launch's grid as three ints within what the runtimes count: a negative, fractional or too large
    dimension is an error here, never a grid cut to 32 bits (2**32 + 1 programs ran one, 2**31 none)."""
    dims = []
    for axis, value in zip("xyz", grid):
        try:
            value = operator.index(value)
        except TypeError:
            raise TypeError(f"kernel '{kernel}': grid dimension {axis} is {value!r}, not an integer") from None
        if not 0 <= value <= _MAX_GRID_DIM:
            raise ValueError(f"kernel '{kernel}': grid dimension {axis} is {value}; each dimension must be "
                             f"within 0..{_MAX_GRID_DIM}")
        dims.append(value)
    if math.prod(dims) > _MAX_PROGRAMS:
        raise ValueError(f"kernel '{kernel}': the grid {tuple(dims)} has more than 2**62 programs")
    return tuple(dims)


class CPULauncher:

    def __init__(self, src, metadata):
        self.src = src
        self.metadata = metadata
        self.kernel_name = metadata.name
        params, self.sources = runtime_params(src)
        self.params = tuple(params)
        facts = KernelFacts.from_metadata(metadata)
        self.addresses = _held_addresses(facts, metadata)
        self.written = frozenset(facts.written_args)
        self.read_in_place = facts.direct_load_args
        self.encoders = [None if p.is_pointer else scalar_encoder(p, self.kernel_name) for p in self.params]
        # A bounds-checked kernel (debug) takes each pointer argument's extent after its own arguments.
        self.extents = extent_params(params) if facts.bounds_checked else []
        self.all_params = self.params + tuple(self.extents)
        self._alias_safe_kernel = None
        self.threads = requested_threads(metadata)

    def _overlaps_written_memory(self, values) -> bool:
        """Whether an argument the kernel reads in place shares bytes with one it writes."""
        written = [byte_range(values[i]) for i in self.written]
        for i in self.read_in_place:
            lo, hi = byte_range(values[i])
            if any(lo < w_hi and w_lo < hi for w_lo, w_hi in written):
                return True
        return False

    @property
    def alias_safe_kernel(self):
        """The copying variant, if a launch with overlapping arguments has needed it (what then ran)."""
        return self._alias_safe_kernel

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
        grid = checked_grid((gridX, gridY, gridZ), self.kernel_name)
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
        if self.extents:
            values += [element_extent(p, values[p.index]) for p in self.params if p.is_pointer]
        if launch_enter_hook is not None:
            launch_enter_hook(launch_metadata)
        arguments = Arguments(self.all_params, tuple(values), self.written, self.threads, self.addresses)
        graph.record(function, grid, arguments)
        with _bounds_errors_recognised():
            function.launch(grid, arguments)
        if launch_exit_hook is not None:
            launch_exit_hook(launch_metadata)

    def finish(self, function, *outcome) -> None:
        """Raises what a launch by the fast path ended in (it calls this only when a launch did not succeed):
        `outcome` is what the kernel object's check() takes."""
        with _bounds_errors_recognised():
            function.check(*outcome)

    def direct_params(self) -> list[tuple] | None:
        """The fast path's description of each parameter, (kind, int bits, argument position, read in place,
        written, and both checked for aliasing; written), or None when a launch of this kernel always needs
        the Python path."""
        plain = all(s.kind == "plain" and not s.path for s in self.sources)
        if not plain or len(self.params) > _DIRECT_MAX_PARAMS or self.addresses:
            return None
        aliasing = bool(self.read_in_place and self.written)
        out = []
        for param, source in zip(self.params, self.sources):
            if param.is_pointer:
                if param.pointee not in SUPPORTED_POINTEE:
                    return None
                kind, bits = _DIRECT_POINTER, 64
            elif param.ty in _DIRECT_SCALARS:
                kind, bits = _DIRECT_SCALARS[param.ty]
            else:
                return None
            out.append((kind, bits, source.position, aliasing and param.index in self.read_in_place,
                        aliasing and param.index in self.written, param.index in self.written))
        return out


class _bounds_errors_recognised:
    """A failed bounds check reaches us as a device assertion: raise it as OutOfBoundsError."""

    def __enter__(self):
        return self

    def __exit__(self, kind, failure, traceback):
        if kind is not None and issubclass(kind, DeviceAssertionError):
            error = OutOfBoundsError.recognise(failure)
            if error is not failure:
                raise error from None
        return False


# The fast path's kinds (cpp/launch.cpp's enum Kind), and the scalar types it encodes.
_DIRECT_POINTER, _DIRECT_INT, _DIRECT_FP32, _DIRECT_FP64, _DIRECT_FP16, _DIRECT_BF16 = range(6)
_DIRECT_MAX_PARAMS = 512   # cpp/launch.cpp's MAX_PARAMS
_DIRECT_SCALARS = {**{ty: (_DIRECT_INT, int(ty[1:])) for ty in ("i1", "i8", "i16", "i32", "i64", "u1", "u8", "u16",
                                                                 "u32", "u64")},
                   "fp32": (_DIRECT_FP32, 32), "fp64": (_DIRECT_FP64, 64), "fp16": (_DIRECT_FP16, 16),
                   "bf16": (_DIRECT_BF16, 16)}


@functools.lru_cache(maxsize=None)
def launch_extension():
    """The fast path's extension module (built on first use), or None where it cannot be built."""
    try:
        import importlib.machinery
        import importlib.util
        from .toolchain import launch_extension as build
        loader = importlib.machinery.ExtensionFileLoader("spine_launch", build())
        module = importlib.util.module_from_spec(importlib.util.spec_from_loader("spine_launch", loader))
        loader.exec_module(module)
        return module
    except Exception as error:  # noqa: BLE001 - any failure leaves the Python launcher, which is complete
        warnings.warn(f"Spine's launch fast path is unavailable ({error}); kernels launch through Python")
        return None


def make_launcher(src, metadata):
    """The launcher triton keeps for a compiled kernel: the fast path where it applies, else CPULauncher."""
    launcher = CPULauncher(src, metadata)
    params = launcher.direct_params()
    extension = launch_extension() if params is not None else None
    if extension is None:
        return launcher
    import torch
    from ..proton import session
    run_grid = assert_pending = 0
    target = getattr(metadata, "arch", None)
    if _runs_in_process(target):
        runtime = executor_for(target, True).runtime
        run_grid, assert_pending = runtime.address("spine_host_run_grid"), runtime.address("spine_assert_pending")
    extents = [POINTEE_BYTES[p.pointee] for p in launcher.params if p.is_pointer] if launcher.extents else []
    settings = functools.partial(runtime_settings, launcher.threads) if launcher.threads else runtime_settings
    return extension.DirectLauncher(params, extents, torch.Tensor, session._sessions, graph._capturing, run_grid,
                                    assert_pending, settings, launcher, launcher.finish)


def _held_addresses(facts: KernelFacts, metadata) -> tuple:
    """The arguments whose values or contents hold addresses the kernel dereferences (a table of tensors'
    data_ptr()s), where the kernel runs outside this process and the launch must translate them
    (held_addresses.py); () in this process, where they are the kernel's own. An address the compile could
    not trace to an argument cannot be translated: such a kernel runs only in this process."""
    if not facts.integer_addresses or _runs_in_process(getattr(metadata, "arch", None)):
        return ()
    if UNTRACED_ADDRESS in facts.address_args:
        raise RuntimeError(f"kernel '{metadata.name}' dereferences pointers made from integers (tensors' "
                           f"data_ptr() values, say) that it does not read from its arguments directly, and "
                           f"they are this process's addresses: it runs only where kernels run in this process "
                           f"(SPINE_TARGET=host, or riscv64 on a riscv64 machine), not under QEMU or on a board")
    return facts.address_args


def _runs_in_process(target: str | None) -> bool:
    """Whether kernels of the target named so run in this process (host, or riscv64 on a riscv64 machine)."""
    return target == "host" or (target == "riscv64" and platform.machine() == "riscv64")


def requested_threads(metadata) -> int:
    """The grid's threads a compiled kernel's options ask for (num_cpu_threads, or triton-cpu's older
    num_threads); 0: none."""
    return getattr(metadata, "num_cpu_threads", 0) or getattr(metadata, "num_threads", 0)
