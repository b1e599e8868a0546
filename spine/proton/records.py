"""What the CPU profiler records: the counter it read, each kernel launch, the intervals inside it
(programs and the scopes a kernel marked), and the scopes the host marked around launches.

Times inside a launch are counter ticks, as the runtime read them (cpp/profile_buffers.c); `Counter`
says what the ticks measure and puts them on the host's CLOCK_MONOTONIC axis, which host scopes use too.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

# What each counter's ticks measure. None of them counts core cycles, and no output calls them cycles.
_MEASURES = {
    "rdtsc": "x86-64 time-stamp counter: wall time at a constant rate (not core cycles)",
    "rdtime": "RISC-V time CSR: wall time at the platform timebase frequency (not core cycles)",
    "cntvct_el0": "Arm generic timer: wall time at the timer frequency (not core cycles)",
    "clock_gettime(CLOCK_MONOTONIC)": "the monotonic clock, in nanoseconds",
}
_EMULATED = ("rdtime under QEMU user mode, which answers with the host's own clock: host time spent "
             "emulating the kernel, not RISC-V timer ticks or cycles (emulated code runs tens of times "
             "slower than native)")


@dataclass(frozen=True)
class Counter:
    name: str            # the instruction or clock the runtime read: "rdtsc", "rdtime", ...
    hz: float            # ticks per second, measured against CLOCK_MONOTONIC
    ticks: int           # one reading of the counter ...
    monotonic_ns: int    # ... and of CLOCK_MONOTONIC, taken together
    target: str          # the architecture the kernels ran on: "x86_64", "riscv64"
    emulated: bool = False

    @property
    def measures(self) -> str:
        if self.emulated:
            return _EMULATED
        return _MEASURES.get(self.name, "an unknown counter")

    @property
    def frequency(self) -> str:
        hz = self.hz
        return f"{hz / 1e9:.3f} GHz" if hz >= 1e9 else f"{hz / 1e6:.3f} MHz"

    def describe(self) -> str:
        return f"{self.name} ({self.target}), ticks at {self.frequency}: {self.measures}"

    def ns(self, ticks):
        """A tick count as a duration in nanoseconds (scalars or numpy arrays)."""
        return ticks * (1e9 / self.hz)

    def monotonic(self, ticks):
        """A counter reading as CLOCK_MONOTONIC nanoseconds: the time axis host scopes use."""
        return self.monotonic_ns + (np.asarray(ticks, dtype=np.float64) - float(self.ticks)) * (1e9 / self.hz)

    def as_dict(self) -> dict:
        return {"counter": self.name, "target": self.target, "unit": "ticks", "frequency_hz": self.hz,
                "measures": self.measures, "emulated": self.emulated}


# What a profiled launch returns (cpp/profile_buffers.h): a header (spine_profile_header_t), the records,
# then the scope names. A record's `name` indexes the names, where "" (index 0) marks a program instance.
BLOCK_HEADER = struct.Struct("<6I4Q")
BLOCK_MAGIC, BLOCK_VERSION = 0x52505053, 1
RECORD = np.dtype([("start", "<u8"), ("end", "<u8"), ("name", "<u8"), ("pid", "<i4", (3,)),
                   ("thread", "<u2"), ("depth", "<u2")])


@dataclass(frozen=True)
class BlockHeader:
    records: int
    names: int
    names_bytes: int
    threads: int        # grid threads the launch could use
    start: int          # counter ticks just before and after the grid ran (in the runtime)
    end: int
    dropped: int        # records the runtime could not store
    unmatched: int      # scope ends without a start, or starts never ended

    @classmethod
    def read(cls, data: bytes) -> "BlockHeader":
        magic, version, *fields = BLOCK_HEADER.unpack_from(data, 0)
        if magic != BLOCK_MAGIC or version != BLOCK_VERSION:
            raise RuntimeError(f"profile block has magic {magic:#x} version {version}; expected "
                               f"{BLOCK_MAGIC:#x} {BLOCK_VERSION}")
        return cls(*fields)


@dataclass(frozen=True)
class Interval:
    name: str                       # the scope's name; "" for a program instance
    program: tuple[int, int, int]
    thread: int                     # grid thread: 0 the launching thread, k the pool's k-th worker
    start: int                      # counter ticks
    end: int
    depth: int                      # programs 0, their outermost scopes 1, ...

    @property
    def is_program(self) -> bool:
        return self.name == ""


@dataclass
class Launch:
    """One kernel launch. Its records stay in the runtime's block until something reads them (outputs,
    tests): a launch costs Python one header unpack."""
    kernel: str
    grid: tuple[int, int, int]
    target: str                     # "host", "riscv64", "riscv64 (QEMU user mode)"
    counter: Counter
    wall_ns: int                    # the runtime call seen from Python (under QEMU: the request to the guest)
    started_ns: int = 0             # CLOCK_MONOTONIC when Python started the launch
    block: bytes = field(default=b"", repr=False)
    host_scopes: tuple[str, ...] = ()   # the host scopes open around the launch, outermost first
    host_thread: int = 0            # the Python thread that launched it
    header: BlockHeader = field(init=False)

    def __post_init__(self):
        self.header = BlockHeader.read(self.block)

    start = property(lambda self: self.header.start)
    end = property(lambda self: self.header.end)
    threads = property(lambda self: self.header.threads)
    dropped = property(lambda self: self.header.dropped)
    unmatched = property(lambda self: self.header.unmatched)

    @cached_property
    def records(self) -> np.ndarray:
        """RECORD entries, each thread's together in the order they started (read-only, over the block)."""
        return np.frombuffer(self.block, dtype=RECORD, count=self.header.records, offset=BLOCK_HEADER.size)

    @cached_property
    def names(self) -> tuple[str, ...]:
        at = BLOCK_HEADER.size + self.header.records * RECORD.itemsize
        text = self.block[at:at + self.header.names_bytes].decode(errors="replace")
        return tuple(text.split("\0")[:self.header.names])

    @property
    def label(self) -> str:
        return f"{self.kernel}[{self.grid[0]},{self.grid[1]},{self.grid[2]}]"

    @property
    def duration_ns(self) -> float:
        return float(self.counter.ns(self.end - self.start))

    def durations_ns(self) -> np.ndarray:
        """Each record's duration in nanoseconds (records are in ticks)."""
        r = self.records
        ticks = r["end"].astype(np.int64) - r["start"].astype(np.int64)
        return self.counter.ns(np.maximum(ticks, 0).astype(np.float64))

    def intervals(self) -> list[Interval]:
        r = self.records
        return [Interval(self.names[int(n)], (int(p[0]), int(p[1]), int(p[2])), int(t), int(s), int(e), int(d))
                for s, e, n, p, t, d in zip(r["start"], r["end"], r["name"], r["pid"], r["thread"], r["depth"])]

    def scopes(self) -> list[Interval]:
        return [i for i in self.intervals() if not i.is_program]

    def programs(self) -> list[Interval]:
        return [i for i in self.intervals() if i.is_program]

    def scope_paths(self) -> list[tuple[str, ...]]:
        """For each record in order, the names of the scopes it sits in and its own (programs: ())."""
        paths, stack, thread = [], [], None
        names = self.names
        for n, t, d in zip(self.records["name"].tolist(), self.records["thread"].tolist(),
                           self.records["depth"].tolist()):
            if t != thread:  # each thread's records come together, in the order they started
                stack, thread = [], t
            del stack[d:]
            stack.append(names[n])
            paths.append(tuple(s for s in stack if s))
        return paths


@dataclass(frozen=True)
class HostSpan:
    """A scope the host marked (proton.scope) while a session was listening."""
    name: str
    path: tuple[str, ...]           # the open host scopes around it, and its own name last
    thread: int                     # Python thread ident
    start_ns: int                   # CLOCK_MONOTONIC
    end_ns: int
