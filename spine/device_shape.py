"""What a CPU looks like to code written for GPUs: the device properties and per-kernel numbers that host
code reads to size a launch (Triton's fused-softmax tutorial computes a persistent grid from them).

A CPU runs one program per core at a time, with the core's whole register file and its caches; the GPU
terms map onto that as follows, chosen so that the usual occupancy arithmetic gives a whole number of
programs per core and never divides by zero:

    multiprocessor_count   the grid's threads (SPINE_NUM_THREADS, else every core)
    warpSize               1: a program is one thread
    n_regs (per kernel)    the target's architectural vector registers: 32 (RVV; x86 with AVX-512), 16 (AVX2)
    max_num_regs           n_regs x MAX_WARPS: `max_num_regs // (n_regs * warpSize * num_warps)`, the
                           programs a core holds by registers, is MAX_WARPS / num_warps, at least 1
    max_shared_mem         the L2 cache of one core (of the cluster, SpacemiT K1's 512 KiB, under QEMU)
    shared (per kernel)    the bytes of the kernel's largest tile, at most max_shared_mem: what a program
                           keeps close (`max_shared_mem // shared` programs fit in the L2 at once)
    n_spills               0 (not measured)

Code written for torch.cuda reads the same numbers as attributes of `torch.<device>.get_device_properties(i)`
(FlagGems does, through `torch.cpu`, which has no such function); torch_style_properties gives them so,
with `total_memory` the machine's memory, `L2_cache_size` max_shared_mem, `major`/`minor` 0 (a CPU has no
compute capability) and the target's CPU as `name`.
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass

MAX_WARPS = 32             # triton's largest num_warps
K1_CLUSTER_L2_BYTES = 512 * 1024
_FALLBACK_L2_BYTES = 1 << 20


def vector_registers(target) -> int:
    """The target's architectural vector registers."""
    if target.triple.startswith("riscv"):
        return 32
    from .targets import cpu_features
    return 32 if "+avx512f" in cpu_features(target.triple, target.cpu, target.features) else 16


def l2_bytes(target) -> int:
    """One core's L2 cache: this machine's, read from sysfs, for native code; K1's cluster L2 otherwise."""
    if not target.is_native:
        return K1_CLUSTER_L2_BYTES
    return _native_l2_bytes()


@functools.lru_cache(maxsize=None)
def _native_l2_bytes(root: str = "/sys/devices/system/cpu/cpu0/cache") -> int:
    try:
        for index in sorted(os.listdir(root)):
            with open(os.path.join(root, index, "level")) as f:
                if f.read().strip() != "2":
                    continue
            with open(os.path.join(root, index, "size")) as f:
                return _size_bytes(f.read().strip())
    except (OSError, ValueError):
        pass
    return _FALLBACK_L2_BYTES


def _size_bytes(text: str) -> int:
    """sysfs's cache size ("2048K", "1M") in bytes."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if text and text[-1] in units:
        return int(text[:-1]) * units[text[-1]]
    return int(text)


def device_properties(target, grid_threads: int) -> dict:
    registers = vector_registers(target)
    return {"max_shared_mem": l2_bytes(target), "multiprocessor_count": grid_threads,
            "max_num_regs": registers * MAX_WARPS, "warpSize": 1, "max_threads_per_sm": MAX_WARPS,
            "mem_clock_rate": 0, "mem_bus_width": 0, "sm_clock_rate": 0}


@dataclass(frozen=True)
class TorchStyleProperties:
    name: str
    total_memory: int
    multi_processor_count: int
    L2_cache_size: int
    warp_size: int = 1
    major: int = 0
    minor: int = 0


def torch_style_properties(target, grid_threads: int) -> TorchStyleProperties:
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return TorchStyleProperties(target.core or target.cpu, memory, grid_threads, l2_bytes(target))


def kernel_shared_bytes(largest_tile_bytes: int, target) -> int:
    return min(largest_tile_bytes, l2_bytes(target))
