"""A session as a table on the console (PROTON_OUTPUT unset): one row per kernel and grid, with the
scopes inside it below; PROTON_VERBOSE=1 adds what each grid thread did."""
from __future__ import annotations

import sys
from collections import defaultdict

from .. import switches
from .listeners import Session
from .tree import HOST, KERNEL, build_tree, counters_of


def _us(ns: float) -> str:
    return f"{ns / 1000.0:12.2f}"


def _kernel_rows(session: Session) -> list[str]:
    durations = defaultdict(list)
    for launch in session.launches:
        durations[(launch.label, launch.target)].append(launch.duration_ns)
    tree = build_tree(session, by_grid=True)
    kernels = {(n.name, n.target): n for n, _ in tree.walk() if n.kind == KERNEL}
    lines = [f"{'Kernel':<34}{'Target':<26}{'Launches':>9}{'Total(us)':>12}{'Min(us)':>12}{'Max(us)':>12}"
             f"{'Avg(us)':>12}"]
    for (label, target), times in durations.items():
        lines.append(f"{label:<34}{target:<26}{len(times):>9}{_us(sum(times))}{_us(min(times))}{_us(max(times))}"
                     f"{_us(sum(times) / len(times))}")
        kernel = kernels.get((label, target))
        if kernel is not None and kernel.children:
            lines += _scope_rows(kernel)
    return lines


def _scope_rows(kernel) -> list[str]:
    lines = [f"    {'scope':<30}{'Count':>9}{'Thread time(us)':>17}{'Mean(us)':>12}{'Share':>8}"
             f"   (share: of the {kernel.thread_time_ns / 1000.0:.2f} us its programs took on all threads)"]
    for node, depth in kernel.walk():
        if node is kernel:
            continue
        share = node.time_ns / kernel.thread_time_ns if kernel.thread_time_ns else float("nan")
        name = "  " * (depth - 1) + node.name
        lines.append(f"    {name:<30}{node.count:>9}{node.time_ns / 1000.0:17.2f}"
                     f"{node.time_ns / max(node.count, 1) / 1000.0:12.3f}{share:8.1%}")
    return lines


def _host_rows(session: Session) -> list[str]:
    tree = build_tree(session)
    rows = [(n, d) for n, d in tree.walk() if n.kind == HOST and n.count]
    if not rows:
        return []
    lines = ["", f"{'Host scope':<40}{'Count':>9}{'Total(us)':>12}{'Avg(us)':>12}"]
    for node, depth in rows:
        lines.append(f"{'  ' * (depth - 1) + node.name:<40}{node.count:>9}{_us(node.time_ns)}"
                     f"{_us(node.time_ns / node.count)}")
    return lines


def _thread_rows(session: Session) -> list[str]:
    """Per grid thread of each kernel: programs run, time in them, time in each scope."""
    per = defaultdict(lambda: defaultdict(lambda: [0, 0.0]))  # (label, target) → (thread, name) → [n, ns]
    for launch in session.launches:
        r = launch.records
        if not len(r):
            continue
        ns = launch.durations_ns()
        for thread, name, duration in zip(r["thread"].tolist(), r["name"].tolist(), ns.tolist()):
            cell = per[(launch.label, launch.target)][(thread, launch.names[name] or "(programs)")]
            cell[0] += 1
            cell[1] += duration
    lines = []
    for (label, target), cells in per.items():
        lines += ["", f"{label} ({target}), per grid thread:",
                  f"    {'thread':>6}  {'what':<28}{'Count':>9}{'Time(us)':>12}"]
        for (thread, name), (count, ns_total) in sorted(cells.items()):
            lines.append(f"    {thread:>6}  {name:<28}{count:>9}{_us(ns_total)}")
    return lines or ["", "(no per-thread records: set PROTON_VERBOSE=1 before the launches, or instrument "
                         "the kernel with proton scopes)"]


def format_table(session: Session, verbose: bool | None = None) -> str:
    verbose = switches.PROTON_VERBOSE.get() if verbose is None else verbose
    lines = [f"=== Spine CPU Proton: {session.name} ==="]
    counters = counters_of(session)
    for c in counters:
        lines.append(f"counter: {c.describe()}")
    if not session.launches and not session.host_spans:
        return "\n".join(lines + ["(nothing recorded)"])
    lines += _kernel_rows(session) + _host_rows(session)
    if verbose:
        lines += _thread_rows(session)
    dropped = sum(launch.dropped for launch in session.launches)
    unmatched = sum(launch.unmatched for launch in session.launches)
    if dropped or unmatched or session.dropped_launches:
        lines.append(f"note: {dropped} records dropped, {unmatched} scope ends without a start (or starts "
                     f"never ended), {session.dropped_launches} launches not kept")
    return "\n".join(lines)


def print_table(session: Session, file=None) -> None:
    print(format_table(session), file=file or sys.stdout, flush=True)
