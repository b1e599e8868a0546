"""What the runtimes take from the environment for a launch: the grid's threads, the kernel timeout, and
whether kernel capture is on, read from spine/switches.py (which parses and validates them) and put in the
form the C runtime and the kernel server protocol take.

A leaf below every launch path (native.py, qemu.py, remote.py, and the host fast path through
launcher.py): the C runtime reads no environment variable of its own, so each rule has one definition."""
from __future__ import annotations

import os
from typing import NamedTuple

from .. import switches

CORES = os.cpu_count() or 1

# Thread counts cross into C and the RUN message as int32; the grid never starts more than a few hundred.
_MOST_THREADS = 2**31 - 1
# grid.c's deadline is int64 ns: a timeout past this (126 years; switches._seconds already reads anything
# from 1e10 s on as none) saturates rather than overflows.
_LONGEST_TIMEOUT_NS = 4 * 10**18


def num_threads() -> int | None:
    """SPINE_NUM_THREADS, or None when unset."""
    value = switches.NUM_THREADS.get()
    return None if value is None else min(value, _MOST_THREADS)


def _asked_threads(requested: int) -> int:
    """What the kernel asks for (the num_cpu_threads option), else SPINE_NUM_THREADS; 0: neither."""
    return min(requested, _MOST_THREADS) if requested else (num_threads() or 0)


def default_num_threads(requested: int = 0) -> int:
    """The grid's threads for a launch: what its kernel or SPINE_NUM_THREADS asks for, else this machine's
    cores."""
    return _asked_threads(requested) or CORES


def board_num_threads(requested: int = 0) -> int:
    """The same for a board, whose cores only it knows: 0 there means all of them."""
    return _asked_threads(requested)


def _kernel_timeout() -> float:
    """SPINE_KERNEL_TIMEOUT's seconds (0.0: none)."""
    return switches.KERNEL_TIMEOUT.get()


def guest_kernel_timeout() -> float | None:
    """Seconds a launch under QEMU or on a board may take (default 600), None for no limit."""
    value = _kernel_timeout()
    return value if value > 0 else None


def host_kernel_timeout_ns() -> int:
    """The host runtime's timeout in ns (0: none). It has no default there: a native kernel may rightly run
    for many minutes, and only the user knows how long is too long. A tiny timeout stays one (1 ns)."""
    if switches.KERNEL_TIMEOUT.raw() is None:
        return 0
    seconds = _kernel_timeout()
    if seconds == 0:
        return 0
    return max(1, min(int(seconds * 1e9), _LONGEST_TIMEOUT_NS))


# cpp/kernel_server.c's MAX_KERNELS
_MOST_KERNEL_SLOTS = 4096


def kernel_server_options() -> tuple[str, ...]:
    """The kernel server's command-line options from this process's switches (the server, under QEMU or
    on a board, reads no environment variable: a board's shell would not have this process's)."""
    return ("--kernel-slots", str(min(switches.SERVER_KERNEL_SLOTS.get(), _MOST_KERNEL_SLOTS)))


class RuntimeSettings(NamedTuple):
    """What the host fast path (cpp/launch.cpp) keeps while the environment is unchanged."""
    threads: int
    capture: bool          # PROTON_KERNEL_CAPTURE: launches go through the Python launcher, which records
    timeout_ns: int


def runtime_settings(requested_threads: int = 0) -> RuntimeSettings:
    """Read anew whenever the environment changed; a bad value raises ValueError naming the variable.
    `requested_threads`: the kernel's num_cpu_threads option (0: none)."""
    return RuntimeSettings(default_num_threads(requested_threads), bool(switches.KERNEL_CAPTURE.get()),
                           host_kernel_timeout_ns())
