"""Launch graphs: a sequence of kernel launches recorded once and replayed, as CUDA graphs are on a GPU.

A model's decode step launches the same kernels on the same buffers every token: only the numbers in
those buffers change. Going through triton's `JITFunction.run` costs about 10 us a launch (binding the
arguments, the specialisation key, the cache look-up) before Spine's launcher runs; a 30-layer decoder
launches nearly 200 kernels a token. A graph keeps what each launch finally ran (the compiled kernel, its
grid and its encoded arguments) and replays exactly that:

    graph = LaunchGraph()
    with graph.capture():          # the kernels run as usual, and are recorded
        out = step(x)              # x, out: tensors the graph keeps and replays on
    x.copy_(...); graph.replay()   # the same launches, on the same memory

As with CUDA graphs, a replay reads the values now in the captured tensors and the scalars as captured:
what changes between replays (a position, a token id) must live in a tensor the kernels read. The graph
holds the launches' tensors, so their memory is not reused while it lives. Only launches made by the
capturing thread are recorded; while any graph captures, launches take the Python launcher (where the
recording is), so they run as they would have. Launch hooks are not replayed."""
from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import dataclass

from ..proton import session as proton
from .arguments import Arguments
from .native import PreparedGraph, PreparedLaunch
from .settings import runtime_settings

# The graphs capturing now. The C++ launcher holds this very list (launcher.py) and sends every launch to
# the Python launcher while it is not empty, so it is only ever changed in place.
_capturing: list[LaunchGraph] = []
_lock = threading.Lock()


@dataclass(frozen=True)
class RecordedLaunch:
    """One launch as it ran: the loaded kernel (an executor's Kernel), its grid and its arguments."""
    kernel: object
    grid: tuple[int, int, int]
    arguments: Arguments

    def prepared(self):
        """This launch ready to run again: the kernel's own prepared launch where it has one (NativeKernel:
        a PreparedLaunch, its slots encoded once), else a callable (settings, profiled) that launches it."""
        prepare = getattr(self.kernel, "prepare", None)
        if prepare is not None:
            return prepare(self.grid, self.arguments)
        return lambda settings, profiled: self.kernel.launch(self.grid, self.arguments)


def _steps(launches: list) -> list:
    """The callables (settings, profiled) a replay runs: consecutive native launches of one runtime joined
    into one PreparedGraph (one call into the runtime for all of them), any other launch alone."""
    steps, group = [], []
    for launch in launches:
        prepared = launch.prepared()
        if group and not (isinstance(prepared, PreparedLaunch) and prepared.kernel.runtime is group[0].kernel.runtime):
            steps.append(PreparedGraph(group).run)
            group = []
        if isinstance(prepared, PreparedLaunch):
            group.append(prepared)
        else:
            steps.append(prepared)
    if group:
        steps.append(PreparedGraph(group).run)
    return steps


class LaunchGraph:
    """Kernel launches recorded by `capture()` and run again, in order, by `replay()`."""

    def __init__(self):
        self.launches: list[RecordedLaunch] = []
        self._runs: list | None = None   # the launches prepared, at the first replay
        self._thread: int | None = None

    @contextmanager
    def capture(self):
        """Records every launch this thread makes inside the block (replacing what the graph held). A
        failure inside the block leaves the graph empty."""
        if self._thread is not None:
            raise RuntimeError("this graph is already capturing")
        self.launches, self._runs = [], None
        self._thread = threading.get_ident()
        with _lock:
            _capturing.append(self)
        try:
            yield self
        except BaseException:
            self.launches = []
            raise
        finally:
            with _lock:
                _capturing.remove(self)
            self._thread = None

    def replay(self) -> None:
        """Runs the recorded launches in order; a fault or a failed assertion raises as the launch would."""
        if self._thread is not None:
            raise RuntimeError("a graph cannot be replayed while it captures")
        if self._runs is None:
            self._runs = _steps(self.launches)
        settings = runtime_settings()   # read once: a bad variable raises before anything runs
        profiled = settings.capture or any(s.active for s in proton._sessions)
        for run in self._runs:
            run(settings, profiled)

    def __len__(self) -> int:
        return len(self.launches)


def record(kernel, grid: tuple[int, int, int], arguments: Arguments) -> None:
    """Called by the Python launcher for every launch it runs: adds it to the graph this thread captures."""
    if not _capturing:
        return
    me = threading.get_ident()
    for graph in _capturing:
        if graph._thread == me:
            graph.launches.append(RecordedLaunch(kernel, grid, arguments))
