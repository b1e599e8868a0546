"""A session as a Chrome trace (JSON; opens in Perfetto and chrome://tracing).

Layout: one process for the host, with a track per Python thread (host scopes, and each launch as
Python saw it); one process per kernel target, with a track per grid thread. On a grid thread's track
each launch is a slice, the programs the thread ran are slices inside it (when recorded), and the scopes
a kernel marked nest inside their program. Every time is put on the host's CLOCK_MONOTONIC axis (the
runtime's counter is calibrated against it) and written in microseconds from the session's first event;
the process names and `otherData` say which counter was read, at what frequency, and what it measures.
"""
from __future__ import annotations

import json

import numpy as np

from .records import Launch
from .listeners import Session
from .tree import counters_of

HOST_PID = 1


def _us(ns: float, origin: float) -> float:
    return round((ns - origin) / 1000.0, 3)


class _TraceBuilder:

    def __init__(self, origin: float):
        self.origin = origin
        self.events: list = []
        self.processes: dict = {}       # (target, counter name) → pid
        self.host_threads: dict = {}    # Python thread ident → tid

    def slice(self, name: str, pid: int, tid: int, start_ns: float, end_ns: float, args: dict | None = None):
        ts, end = _us(start_ns, self.origin), _us(end_ns, self.origin)
        event = {"name": name, "ph": "X", "pid": pid, "tid": tid, "ts": ts, "dur": round(max(end - ts, 0.0), 3)}
        if args:
            event["args"] = args
        self.events.append(event)

    def meta(self, kind: str, pid: int, name: str, tid: int | None = None, sort: int | None = None):
        event = {"name": kind, "ph": "M", "pid": pid, "args": {"name": name}}
        if tid is not None:
            event["tid"] = tid
        self.events.append(event)
        if sort is not None:
            self.events.append({"name": kind.replace("_name", "_sort_index"), "ph": "M", "pid": pid,
                                **({"tid": tid} if tid is not None else {}), "args": {"sort_index": sort}})

    def host_tid(self, ident: int) -> int:
        if ident not in self.host_threads:
            self.host_threads[ident] = len(self.host_threads) + 1
            tid = self.host_threads[ident]
            self.meta("thread_name", HOST_PID, f"Python thread {tid}", tid, sort=tid)
        return self.host_threads[ident]

    def kernel_pid(self, launch: Launch) -> int:
        c = launch.counter
        key = (launch.target, c.name, c.emulated)
        if key not in self.processes:
            pid = self.processes[key] = HOST_PID + 1 + len(self.processes)
            how = "host time under QEMU user mode" if c.emulated else "wall time"
            self.meta("process_name", pid, f"{launch.target} kernels ({c.name} at {c.frequency}: {how})",
                      sort=pid)
        return self.processes[key]


def _launch_events(b: _TraceBuilder, launch: Launch, index: int, threads_named: set) -> None:
    pid, c = b.kernel_pid(launch), launch.counter
    start, end = float(c.monotonic(launch.start)), float(c.monotonic(launch.end))
    args = {"kernel": launch.kernel, "grid": list(launch.grid), "launch": index, "threads": launch.threads,
            "ticks": int(launch.end - launch.start), "counter": c.name, "frequency_hz": c.hz}
    if launch.unmatched or launch.dropped:
        args.update(unmatched_scope_ends=launch.unmatched, dropped_records=launch.dropped)
    if launch.started_ns:
        b.slice(launch.label, HOST_PID, b.host_tid(launch.host_thread), launch.started_ns,
                launch.started_ns + launch.wall_ns,
                {"seen from": "Python: the runtime call (under QEMU, the request to the guest server)", **args})
    records = launch.records
    threads = sorted(set(records["thread"].tolist())) if len(records) else [0]
    for t in threads:
        if (pid, t) not in threads_named:
            threads_named.add((pid, t))
            b.meta("thread_name", pid, f"grid thread {t}" + (" (launching thread)" if t == 0 else ""), t, sort=t)
        b.slice(launch.label, pid, t, start, end, args)
    if not len(records):
        return
    starts, ends = c.monotonic(records["start"]), c.monotonic(records["end"])
    for r, s, e in zip(records, starts.tolist(), ends.tolist()):
        pid_xyz = [int(v) for v in r["pid"]]
        name = launch.names[int(r["name"])] or f"program ({pid_xyz[0]}, {pid_xyz[1]}, {pid_xyz[2]})"
        b.slice(name, pid, int(r["thread"]), s, e, {"program": pid_xyz, "ticks": int(r["end"] - r["start"])})


def _origin(session: Session) -> float:
    times = [s.start_ns for s in session.host_spans]
    times += [launch.started_ns for launch in session.launches if launch.started_ns]
    times += [float(launch.counter.monotonic(launch.start)) for launch in session.launches]
    return float(np.min(times)) if times else 0.0


def to_trace(session: Session) -> dict:
    with session.lock:
        snapshot = Session(session.name, launches=list(session.launches), host_spans=list(session.host_spans))
    b = _TraceBuilder(_origin(snapshot))
    b.meta("process_name", HOST_PID, "host (Python)", sort=0)
    for span in snapshot.host_spans:
        b.slice(span.name, HOST_PID, b.host_tid(span.thread), span.start_ns, span.end_ns,
                {"path": "/".join(span.path)})
    named: set = set()
    for index, launch in enumerate(snapshot.launches):
        _launch_events(b, launch, index, named)
    counters = counters_of(snapshot)
    return {"traceEvents": b.events, "displayTimeUnit": "ns",
            "otherData": {"profiler": "Spine CPU Proton", "session": session.name,
                          "time axis": "CLOCK_MONOTONIC of the host, microseconds from the first event",
                          "counters": [c.as_dict() for c in counters],
                          "counter summary": "; ".join(c.describe() for c in counters)}}


def write_trace(session: Session, path: str) -> None:
    with open(path, "w") as f:
        json.dump(to_trace(session), f)
