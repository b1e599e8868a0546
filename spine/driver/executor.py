"""What runs a compiled kernel: one small interface, one implementation per place a kernel can run.

An `Executor` loads a kernel binary into a `Kernel`, a small typed object that launches it: `NativeKernel`
(native.py) calls it in this process (host target, or riscv64 on a riscv64 machine), `QemuKernel` (qemu.py)
hands it to a guest server under QEMU user mode. The launcher knows nothing about how the binary was made
or where it runs; it passes a grid and the encoded `Arguments` (arguments.py).

This module stands above native.py and qemu.py (executor_for imports them); what they share with the
launcher, such as the grid's thread count, is in settings.py below them all."""
from __future__ import annotations

import functools
from typing import Protocol

from .arguments import Arguments


class Kernel(Protocol):
    """A loaded kernel.

    The launch fast path (cpp/launch.cpp) may skip launch(): it calls `direct_entry` itself when that is
    an entry point in this process (NativeKernel), or uses `direct_server(arena_bytes)` when the kernel
    object has one (QemuKernel); either way it hands an unsuccessful launch's outcome to `check`, which
    raises. A kernel with `direct_entry` 0 and no `direct_server` always goes through launch()."""
    name: str
    so_path: str
    direct_entry: int

    def launch(self, grid: tuple[int, int, int], args: Arguments) -> None:
        """Runs the grid; raises KernelFault when the kernel faults, DeviceAssertionError when a device
        assertion (or a bounds check) failed."""

    def __call__(self, grid: tuple[int, int, int], args: Arguments) -> None: ...

    def check(self, *outcome) -> None: ...


class Executor(Protocol):
    def load(self, name: str, so_path: str) -> Kernel: ...

    def shutdown(self) -> None:
        """Releases what the executor holds (a guest process); the next launch starts anew."""


def executor_for(target_name: str, native: bool, vector_bits: int = 0) -> Executor:
    """One executor per kind of target, whatever CPU or features its kernels were compiled for; under QEMU,
    one more for each VLEN code needs beyond QEMU's configured one (`vector_bits`: K3 A100's VLEN 1024 code
    runs on a guest CPU of that VLEN, all other code, which needs no more than SPINE_QEMU_CPU gives, on
    that)."""
    if not native and target_name == "riscv64":
        from .qemu import configured_vector_bits
        vector_bits = vector_bits if vector_bits > configured_vector_bits() else 0
    return _executor(target_name, native, 0 if native else vector_bits)


@functools.lru_cache(maxsize=None)
def _executor(target_name: str, native: bool, vector_bits: int) -> Executor:
    if native:
        from .native import NativeExecutor
        return NativeExecutor()
    if target_name == "riscv64":
        from .qemu import QemuExecutor
        return QemuExecutor(vector_bits)
    raise RuntimeError(f"cannot run code for {target_name} on this machine")
