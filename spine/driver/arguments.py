"""Checks and encodes kernel arguments into the 8-byte slots the generated entry point reads."""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Callable

# fp8 tensors (torch.float8_e5m2 / float8_e4m3fn / float8_e4m3fnuz / float8_e5m2fnuz, or int8 tensors
# reinterpreted with triton.reinterpret) are bytes to the kernel (to_linalg/fp8.py).
FP8_POINTEE = {"fp8e5", "fp8e4nv", "fp8e4b15", "fp8e4b8", "fp8e5b16"}
SUPPORTED_POINTEE = {"fp16", "bf16", "fp32", "fp64", "i1", "u1", "i8", "i16", "i32", "i64", "u8", "u16", "u32",
                     "u64"} | FP8_POINTEE
_INT_BITS = {"i1": 1, "i8": 8, "i16": 16, "i32": 32, "i64": 64, "u1": 1, "u8": 8, "u16": 16, "u32": 32, "u64": 64}


@dataclass(frozen=True)
class Param:
    """One runtime parameter of a compiled kernel."""
    index: int        # position among the kernel's runtime (non-constexpr) parameters
    name: str
    ty: str           # triton's signature string: "*fp32", "i32", "fp32", ...

    @property
    def is_pointer(self) -> bool:
        return self.ty.startswith("*")

    @property
    def pointee(self) -> str:
        return self.ty.lstrip("*k")


@dataclass(frozen=True)
class Arguments:
    """One launch's arguments, as a kernel object takes them: a CPU tensor for each pointer parameter,
    the 8-byte encoding of each scalar (scalar_encoder), and which parameters the kernel may write."""
    params: tuple[Param, ...]
    values: tuple
    written: frozenset[int]
    threads: int = 0     # the grid's threads the kernel asks for (its num_cpu_threads option); 0: the default
    # parameters whose value or contents hold addresses the kernel dereferences, where it runs in another
    # address space (held_addresses.py); () where it runs in this process
    addresses: tuple = ()

    def slots(self) -> list[int]:
        """The entry point's 8-byte slots when tensors are passed by their data pointer."""
        return [value.data_ptr() if param.is_pointer else value for param, value in zip(self.params, self.values)]


def _float_encoder(fmt: str) -> Callable[[object], int]:
    def encode(value):
        return int.from_bytes(struct.pack(fmt, float(value)), "little")
    return encode


def _bf16_encode(value) -> int:
    bits = int.from_bytes(struct.pack("<f", float(value)), "little")
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF  # round to nearest even


def scalar_encoder(param: Param, kernel: str) -> Callable[[object], int]:
    ty = param.ty
    if ty in _INT_BITS:
        mask = (1 << _INT_BITS[ty]) - 1

        def encode_int(value):
            if not isinstance(value, (int, bool)) and not hasattr(value, "__index__"):
                raise TypeError(f"argument '{param.name}' of kernel '{kernel}' expects an integer ({ty}), "
                                f"got {type(value).__name__}")
            return int(value) & mask
        return encode_int
    if ty == "fp32":
        return _float_encoder("<f")
    if ty == "fp64":
        return _float_encoder("<d")
    if ty == "fp16":
        return _float_encoder("<e")
    if ty == "bf16":
        return _bf16_encode
    raise ValueError(f"argument '{param.name}' of kernel '{kernel}' has type {ty}, which Spine cannot pass yet")


def unwrap_tensor(value):
    """The torch tensor behind `triton.reinterpret(t, dtype)` (a TensorWrapper: same memory, another
    element type, which the kernel's signature already carries); any other value as it is."""
    from triton.runtime.jit import TensorWrapper
    while isinstance(value, TensorWrapper):
        value = value.base
    return value


def is_raw_pointer(value) -> bool:
    """Whether a pointer argument is an address alone: an object triton takes as a pointer (`data_ptr()`
    and `dtype`) that names no tensor's storage and no device (FlagGems' TypedPtr). Its extent is unknown."""
    import torch
    if isinstance(value, torch.Tensor) or not (hasattr(value, "data_ptr") and hasattr(value, "dtype")):
        return False
    storage = getattr(value, "untyped_storage", None)
    return not hasattr(value, "device") and (storage is None or not isinstance(storage(), torch.UntypedStorage))


def check_tensor(param: Param, value, kernel: str) -> None:
    """Pointer arguments must be CPU tensors of a dtype Spine supports, or objects triton takes as pointers
    (`data_ptr()` and `dtype`) that name a CPU tensor's storage (`untyped_storage()`, as FlagGems'
    StridedBuffer does), or (host kernels only: launcher.py) raw addresses of this process's memory
    (is_raw_pointer)."""
    if is_raw_pointer(value):
        device = "cpu"
    else:
        try:
            device = value.device.type if hasattr(value, "device") else value.untyped_storage().device.type
        except AttributeError:
            raise TypeError(f"argument '{param.name}' of kernel '{kernel}' expects a CPU torch tensor "
                            f"(pointer {param.ty}), got {type(value).__name__}") from None
    if device != "cpu":
        raise TypeError(f"argument '{param.name}' of kernel '{kernel}' is on device '{value.device}'; "
                        f"Spine runs kernels on CPU tensors: move it with .cpu()")
    if param.pointee not in SUPPORTED_POINTEE:
        raise ValueError(f"argument '{param.name}' of kernel '{kernel}' has dtype {value.dtype}, which Spine "
                         f"does not support; expected one of float16/bfloat16/float32/float64/int8-64/uint8/bool "
                         f"or an fp8 type")


RAW_POINTER_END = 1 << 62      # the extent a raw pointer is given: past any address a process has


def byte_range(tensor) -> tuple[int, int]:
    """[first, last + 1) bytes a tensor view may touch (strides are non-negative in torch). For another
    object triton takes as a pointer (check_tensor), which has no shape Spine can trust (FlagGems'
    StridedBuffer has negative strides for flip), the whole storage it names; for a raw pointer, all of
    memory."""
    import torch
    if is_raw_pointer(tensor):      # any byte: whatever reads or writes it may overlap it
        return 0, RAW_POINTER_END
    if not isinstance(tensor, torch.Tensor):
        storage = tensor.untyped_storage()
        if not isinstance(storage, torch.UntypedStorage):
            raise TypeError(f"a pointer argument must be a tensor or name a tensor's storage "
                            f"(untyped_storage()), got {type(tensor).__name__}")
        return storage.data_ptr(), storage.data_ptr() + storage.nbytes()
    lo = tensor.data_ptr()
    if not tensor.numel():
        return lo, lo
    extent = 1 + sum((s - 1) * st for s, st in zip(tensor.shape, tensor.stride()))
    return lo, lo + extent * tensor.element_size()


POINTEE_BYTES = {"fp16": 2, "bf16": 2, "fp32": 4, "fp64": 8, "i1": 1, "u1": 1, "i8": 1, "u8": 1, "i16": 2,
                  "u16": 2, "i32": 4, "u32": 4, "i64": 8, "u64": 8, **{name: 1 for name in FP8_POINTEE}}


def extent_params(params: list[Param]) -> list[Param]:
    """The parameters a bounds-checked kernel (debug) takes after its own: each pointer's extent (i64)."""
    pointers = [p for p in params if p.is_pointer]
    return [Param(len(params) + k, f"{p.name}.extent", "i64") for k, p in enumerate(pointers)]


def element_extent(param: Param, tensor) -> int:
    """How many elements of the parameter's type a kernel may reach from the tensor's data pointer: up
    to the end of the bytes its view may touch."""
    _, hi = byte_range(tensor)
    return (hi - tensor.data_ptr()) // POINTEE_BYTES[param.pointee]
