"""CPUDriver: plugs Spine into triton's runtime (`triton.runtime.driver.set_active(CPUDriver())`)."""
from __future__ import annotations

import hashlib
import os
import sys

from triton.backends.compiler import GPUTarget
from triton.backends.driver import DriverBase

from ..cache import atomic_write_bytes, cache_dir
from .. import switches
from ..switches import compile_key_values
from ..spacemit_cores import core_named
from ..targets import Target, host_target, min_vector_bits, riscv64_target, target_from_name, target_name
from ..device_shape import device_properties, torch_style_properties, vector_registers
from .device_interface import CPUDeviceInterface
from .executor import executor_for
from .settings import default_num_threads
from .launcher import launch_extension, make_launcher


# (target, environment switches) → the device index triton keys its in-memory kernel cache by. Process-wide,
# because triton's JIT functions keep their caches across driver instances.
_DEVICE_INDEX: dict = {}
# The same, keyed by the raw environment as the launch fast path's extension reads it (bytes, not str):
# triton asks for the device on every launch, and os.environ costs microseconds per variable.
_RAW_DEVICE_INDEX: dict = {}
_COMPILE_KEY_NAMES = tuple(s.name for s in switches.ALL if s.compile_key)
_MODULES = sys.modules
_ELF_MACHINES = {243: "riscv64", 62: "x86_64", 183: "aarch64"}


def target_of_binary(kernel: bytes) -> Target:
    machine = _ELF_MACHINES.get(int.from_bytes(kernel[18:20], "little")) if kernel[:4] == b"\x7fELF" else None
    if machine is None:
        raise RuntimeError("the kernel binary is not an ELF shared object for riscv64, x86-64 or aarch64")
    if machine == "riscv64":
        return riscv64_target()
    host = host_target()
    if machine != host.arch:
        raise RuntimeError(f"the kernel was compiled for {machine}; this machine is {host.arch}")
    return host


def vector_bits_of_binary(kernel: bytes) -> int:
    """The VLEN a riscv64 kernel binary was built for at the least: the largest Zvl<N>b of the architecture
    string LLVM records in its `.riscv.attributes` section (0: none, or not a riscv64 binary)."""
    import io
    import re
    from elftools.elf.elffile import ELFFile
    try:
        section = ELFFile(io.BytesIO(kernel)).get_section_by_name(".riscv.attributes")
    except Exception:   # not an ELF file elftools can read: target_of_binary has said so already
        return 0
    if section is None:
        return 0
    return max((int(n) for n in re.findall(rb"zvl(\d+)b", section.data())), default=0)


def _executor_for(target: Target, vector_bits: int | None = None):
    """The executor that runs `target`'s code: on a VLEN of at least `vector_bits` (default: what the
    target's features assume) under QEMU."""
    remote = switches.REMOTE.get()
    if remote and target.name == "riscv64" and not target.is_native:   # a board (remote.py)
        from .remote import remote_executor
        return remote_executor(remote)
    if target.is_native:
        return executor_for(target.name, True)
    return executor_for(target.name, False, max(min_vector_bits(target), vector_bits or 0))


def _holds(path: str, data: bytes) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read() == data
    except OSError:
        return False


class CPUUtils:
    """The `driver.utils` object triton's CompiledKernel talks to."""

    def __init__(self, driver):
        self.driver = driver

    def load_binary(self, name, kernel: bytes, shared, device):
        # The binary says what it was built for: kernels compiled elsewhere (Inductor's compile workers,
        # another process's cache) run where they can, whatever this driver's current target.
        target = target_of_binary(kernel)
        digest = hashlib.sha256(kernel).hexdigest()[:24]
        path = os.path.join(cache_dir(), "kernels", f"{name[:80]}-{digest}.so")
        if not _holds(path, kernel):  # missing, or damaged since it was written
            atomic_write_bytes(path, kernel)
        loaded = _executor_for(target, vector_bits_of_binary(kernel)).load(name, path)
        # (module, function, n_regs, n_spills, n_max_threads): device_shape.py says what they mean here
        return loaded, loaded, vector_registers(target), 0, 1 << 30

    def get_device_properties(self, device):
        return device_properties(self.driver.target, default_num_threads())


def _give_torch_cpu_gpu_style_calls(driver) -> None:
    """GPU-style code reaches its device through the device's torch module (`getattr(torch, device.type)`):
    Triton's tutorials call `set_stream(stream)`, FlagGems `get_device_properties(i)` and
    `get_device_capability(i)`. torch.cpu has Stream and current_stream, and one stream, but none of
    those: the missing ones are added. set_stream does nothing (kernels run in the order they are
    launched); the properties are device_shape.py's, for the driver's target."""
    import torch

    def properties(device=None):
        from triton.runtime import driver as chosen
        active = chosen.active
        return torch_style_properties((active if isinstance(active, CPUDriver) else driver).target,
                                      default_num_threads())
    calls = {"set_stream": lambda stream: None, "get_device_properties": properties,
             "get_device_capability": lambda device=None: (0, 0)}
    for name, call in calls.items():
        if not hasattr(torch.cpu, name):
            setattr(torch.cpu, name, call)


class CPUDriver(DriverBase):
    """A triton driver for CPU tensors. `target` is "riscv64" (default, or SPINE_TARGET) or "host"."""

    def __init__(self, target: str | None = None):
        super().__init__()
        self._target_name = target
        self.utils = CPUUtils(self)
        self.launcher_cls = make_launcher
        self.device_interface = CPUDeviceInterface()
        # torch.compile's matrix products and attention through Spine even on the host target
        # (spine/inductor/decompositions.py); spine.inductor.enable() sets it
        self.products_through_inductor = False
        _give_torch_cpu_gpu_style_calls(self)

    @property
    def target(self) -> Target:
        return target_from_name(self._target_name)

    @staticmethod
    def is_active():
        # Default driver only where no GPU driver can be: triton refuses two active drivers.
        try:
            import torch
            return not torch.cuda.is_available()
        except ImportError:
            return True

    def get_current_target(self):
        return GPUTarget("cpu", target_name(self.target), 1)

    @property
    def current_arch_id(self) -> str | None:
        """spine-triton's id of the SpacemiT core kernels are built for ("0x503C" for the X60:
        spacemit_cores.py), None when the target is no SpacemiT core (the host, another RISC-V CPU)."""
        core = self.target.core
        return core_named(core).arch_id_text if core else None

    def get_current_device(self):
        # triton keeps its in-memory kernel cache per device. Each distinct (target, compile-affecting
        # environment) is its own "device", so flipping SPINE_TARGET or a dump/profiling switch mid-process
        # compiles anew instead of reusing a kernel built under other settings.
        extension = launch_extension()
        if extension is None:
            return self._device_index()
        flags = _MODULES.get("triton.profiler.flags")  # switches.instrumentation_on, inlined
        raw = (self._target_name, extension.environment(_COMPILE_KEY_NAMES),
               flags is not None and flags.flags.instrumentation_on)
        index = _RAW_DEVICE_INDEX.get(raw)
        if index is None:
            index = _RAW_DEVICE_INDEX[raw] = self._device_index()
        return index

    def _device_index(self) -> int:
        key = (self._target_name, *compile_key_values())
        index = _DEVICE_INDEX.get(key)
        if index is None:
            index = _DEVICE_INDEX[key] = len(_DEVICE_INDEX)
        return index

    def set_current_device(self, device):
        pass

    def get_current_stream(self, device=None):
        return 0

    def get_active_torch_device(self):
        import torch
        return torch.device("cpu")

    def get_device_interface(self):
        return self.device_interface

    def map_python_to_cpp_type(self, ty: str) -> str:
        if ty.startswith("*"):
            return "void*"
        return {"i1": "bool", "i8": "int8_t", "i16": "int16_t", "i32": "int32_t", "i64": "int64_t",
                "u1": "bool", "u8": "uint8_t", "u16": "uint16_t", "u32": "uint32_t", "u64": "uint64_t",
                "fp16": "uint16_t", "bf16": "uint16_t", "fp32": "float", "fp64": "double"}[ty]

    def get_benchmarker(self):
        from triton.testing import do_bench
        return do_bench

    def get_empty_cache_for_benchmark(self):
        import torch
        return torch.empty(32 * 1024 * 1024 // 4, dtype=torch.int32)

    def clear_cache(self, cache):
        cache.zero_()
