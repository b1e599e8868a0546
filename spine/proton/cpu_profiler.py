"""spine-triton's profiler API, `from triton.backends.spine_triton.proton import profiler`:

    with profiler.profile():          # reset, record, then dump (to PROTON_OUTPUT, or a table)
        kernel[grid](...)
    profiler.start(); ...; profiler.stop(); profiler.dump("trace.json")
    profiler.reset(); results = profiler.get_results()

As in spine-triton, the launches of kernels compiled with proton scopes are kept even while the profiler
is not started (so `reset(); kernel[grid](...); dump()` works); between start() and stop() it keeps
every launch.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Optional

from .session import Session, disabled, register
from .tree import KERNEL, SCOPE, build_tree, counters_of


class CPUProfiler:

    def __init__(self):
        self.session = register(Session("profiler", keep_scoped=True))

    def is_available(self) -> bool:
        """False while TRITON_DISABLE_PROTON=1."""
        return not disabled()

    def start(self) -> bool:
        if disabled():
            return False
        self.session.active = True
        return True

    def stop(self) -> bool:
        self.session.active = False
        return True

    def reset(self) -> bool:
        self.session.reset()
        return True

    def dump(self, output_path: Optional[str] = None) -> bool:
        """Writes what was recorded to `output_path`, else PROTON_OUTPUT, else prints a table."""
        if disabled():
            return False
        from .output import write
        write(self.session, output_path)
        return True

    @contextmanager
    def profile(self, output_path: Optional[str] = None, auto_dump: bool = True):
        self.reset()
        self.start()
        try:
            yield self
        finally:
            self.stop()
            if auto_dump:
                self.dump(output_path)

    def get_results(self, records: bool = False) -> dict:
        """What was recorded, as plain data: the counters, per kernel and grid the launch times and the
        scopes inside, the host scopes, and each launch (with every interval when `records`)."""
        return results_of(self.session, records)


def _kernel_results(session: Session) -> dict:
    kernels = {}
    for launch in session.launches:
        entry = kernels.setdefault(launch.label, {"kernel": launch.kernel, "grid": list(launch.grid),
                                                  "target": launch.target, "durations_ns": []})
        entry["durations_ns"].append(launch.duration_ns)
    tree = build_tree(session, by_grid=True)
    for node, _ in tree.walk():
        if node.kind != KERNEL or node.name not in kernels:
            continue
        entry = kernels[node.name]
        times = entry.pop("durations_ns")
        entry.update(launches=len(times), total_ns=sum(times), min_ns=min(times), max_ns=max(times),
                     avg_ns=sum(times) / len(times), thread_time_ns=node.thread_time_ns, programs=node.programs,
                     scopes=_scope_results(node))
    return kernels


def _scope_results(kernel) -> dict:
    scopes, stack = {}, []
    for node, depth in kernel.walk():
        if node.kind != SCOPE:
            continue
        del stack[depth - 1:]
        stack.append(node.name)
        share = node.time_ns / kernel.thread_time_ns if kernel.thread_time_ns else None
        scopes["/".join(stack)] = {"count": node.count, "total_ns": node.time_ns,
                                   "mean_ns": node.time_ns / max(node.count, 1), "share": share}
    return scopes


def _launch_result(launch, records: bool) -> dict:
    c = launch.counter
    out = {"kernel": launch.kernel, "grid": list(launch.grid), "target": launch.target,
           "start_ns": float(c.monotonic(launch.start)), "duration_ns": launch.duration_ns,
           "wall_ns": launch.wall_ns, "threads": launch.threads, "host_scopes": list(launch.host_scopes),
           "dropped": launch.dropped, "unmatched": launch.unmatched}
    if records:
        out["records"] = [{"name": i.name, "program": list(i.program), "thread": i.thread, "depth": i.depth,
                           "start_ns": float(c.monotonic(i.start)), "duration_ns": float(c.ns(i.end - i.start))}
                          for i in launch.intervals()]
    return out


def results_of(session: Session, records: bool = False) -> dict:
    with session.lock:
        snapshot = Session(session.name, launches=list(session.launches), host_spans=list(session.host_spans),
                           host_metrics=dict(session.host_metrics))
    hosts = {}
    for span in snapshot.host_spans:
        entry = hosts.setdefault("/".join(span.path), {"count": 0, "total_ns": 0})
        entry["count"] += 1
        entry["total_ns"] += span.end_ns - span.start_ns
    return {"counters": [c.as_dict() for c in counters_of(snapshot)], "kernels": _kernel_results(snapshot),
            "host_scopes": hosts, "launches": [_launch_result(launch, records) for launch in snapshot.launches]}


profiler = CPUProfiler()


# spine-triton's module-level shortcuts
def start() -> bool:
    return profiler.start()


def stop() -> bool:
    return profiler.stop()


def reset() -> bool:
    return profiler.reset()


def dump(output_path: Optional[str] = None) -> bool:
    return profiler.dump(output_path)


def profile(output_path: Optional[str] = None, auto_dump: bool = True):
    return profiler.profile(output_path, auto_dump)


def get_results(records: bool = False) -> dict:
    return profiler.get_results(records)


def is_available() -> bool:
    return profiler.is_available()
