"""A session as a scope tree: host scopes, the kernels launched inside them, the scopes inside kernels.
Written as a `.hatchet` file (the literal that hatchet's GraphFrame.from_literal reads) and printed by
table.py and viewer.py.

Metrics of each node (all times in nanoseconds, converted from the counter's ticks):
  host scope     count: times entered;  time (ns): wall time, summed
  kernel         count: launches;       time (ns): wall time of the grid, summed over launches;
                 thread time (ns): time spent in programs, summed over all threads; programs
  kernel scope   count: instances (one per program that ran it);  time (ns): summed over instances,
                 so over all threads (compare with the kernel's thread time, not its wall time)
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from .records import Launch
from .listeners import Session

HOST, KERNEL, SCOPE, ROOT = "function", "kernel", "scope", "root"


@dataclass
class Node:
    name: str
    kind: str
    target: str = ""
    count: int = 0
    time_ns: float = 0.0
    thread_time_ns: float = 0.0      # kernels: time in programs over all threads
    programs: int = 0
    metrics: dict = field(default_factory=dict)   # user metrics of host scopes
    children: dict = field(default_factory=dict)

    def child(self, name: str, kind: str, target: str = "") -> "Node":
        key = (name, kind, target)
        if key not in self.children:
            self.children[key] = Node(name, kind, target)
        return self.children[key]

    def walk(self, depth: int = 0):
        yield self, depth
        for child in self.children.values():
            yield from child.walk(depth + 1)


def _host_node(root: Node, path: tuple[str, ...]) -> Node:
    node = root
    for name in path:
        node = node.child(name, HOST)
    return node


def _add_launch(root: Node, launch: Launch, kernel_name: str) -> None:
    kernel = _host_node(root, launch.host_scopes).child(kernel_name, KERNEL, launch.target)
    kernel.count += 1
    kernel.time_ns += launch.duration_ns
    records = launch.records
    if not len(records):
        return
    durations = launch.durations_ns()
    is_program = records["name"] == 0
    kernel.programs += int(is_program.sum())
    kernel.thread_time_ns += float(durations[is_program].sum())
    for path, duration, program in zip(launch.scope_paths(), durations.tolist(), is_program.tolist()):
        if program:
            continue
        node = kernel
        for name in path:
            node = node.child(name, SCOPE)
        node.count += 1
        node.time_ns += duration


def build_tree(session: Session, by_grid: bool = False) -> Node:
    """`by_grid`: one kernel node per grid (`name[gx,gy,gz]`), as spine-triton's table keys them."""
    root = Node("ROOT", ROOT)
    with session.lock:
        spans, launches, metrics = list(session.host_spans), list(session.launches), dict(session.host_metrics)
    for span in spans:
        node = _host_node(root, span.path)
        node.count += 1
        node.time_ns += span.end_ns - span.start_ns
    for path, values in metrics.items():
        _host_node(root, path).metrics.update(values)
    for launch in launches:
        _add_launch(root, launch, launch.label if by_grid else launch.kernel)
    root.count = 1
    root.time_ns = sum(c.time_ns for c in root.children.values())
    return root


def counters_of(session: Session) -> list:
    """The distinct counters a session's launches read (one per target)."""
    seen = {}
    with session.lock:
        for launch in session.launches:
            seen.setdefault((launch.counter.name, launch.counter.target, launch.counter.emulated), launch.counter)
    return list(seen.values())


def _literal(node: Node) -> dict:
    frame = {"name": node.name, "type": node.kind}
    if node.target:
        frame["target"] = node.target
    metrics = {"count": node.count, "time (ns)": node.time_ns, **node.metrics}
    if node.kind == KERNEL:
        metrics.update({"thread time (ns)": node.thread_time_ns, "programs": node.programs})
    return {"frame": frame, "metrics": metrics, "children": [_literal(c) for c in node.children.values()]}


def to_literal(session: Session) -> list:
    """The hatchet literal: one root, whose frame also says which counters were read."""
    root = _literal(build_tree(session))
    root["frame"]["type"] = "function"
    counters = counters_of(session)
    root["frame"]["counters"] = "; ".join(c.describe() for c in counters) or "no kernel launches"
    root["frame"]["unit"] = "time (ns) converted from counter ticks at the frequency named in counters"
    return [root]


def write_hatchet(session: Session, path: str) -> None:
    with open(path, "w") as f:
        json.dump(to_literal(session), f, indent=1)
