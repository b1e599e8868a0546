"""`python -m spine.proton.viewer FILE`: the scope tree of a profile, like triton's proton-viewer.

FILE is a `.hatchet` file (tree.py; a Chrome trace goes to Perfetto instead). Each node
shows its count, total and mean time, and its share: of the whole profile for host scopes and kernels,
of the kernel's time in programs (all threads) for scopes inside a kernel.
"""
from __future__ import annotations

import argparse
import json
import math
import sys

from .tree import KERNEL, SCOPE


def load_graphframe(path: str):
    """A hatchet GraphFrame of the profile, and the counters line its root carries."""
    import hatchet
    with open(path) as f:
        data = json.load(f)
    if isinstance(data, dict) and "traceEvents" in data:
        raise SystemExit(f"{path} is a Chrome trace: open it in Perfetto (ui.perfetto.dev); the viewer reads "
                         f"the .hatchet files the profiler writes with PROTON_OUTPUT=<name>.hatchet")
    gf = hatchet.GraphFrame.from_literal(data)
    return gf, data[0]["frame"].get("counters", "")


def _metric(df, node, column: str) -> float:
    if column not in df.columns:
        return math.nan
    value = df.loc[node, column]
    return float(value) if value == value else math.nan


def _fmt_ns(ns: float) -> str:
    if ns != ns:
        return "-"
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if abs(ns) >= scale:
            return f"{ns / scale:.3f} {unit}"
    return f"{ns:.0f} ns"


def render(gf, counters: str = "") -> str:
    df = gf.dataframe
    roots = gf.graph.roots
    total = sum(_metric(df, c, "time (ns)") for r in roots for c in r.children
                if not math.isnan(_metric(df, c, "time (ns)")))
    lines = [f"counters: {counters}"] if counters else []
    lines.append(f"{'count':>10} {'total':>12} {'mean':>12} {'share':>7}  scope")

    def visit(node, depth: int, kernel_thread_ns: float):
        kind = node.frame.get("type")
        count = _metric(df, node, "count")
        time_ns = _metric(df, node, "time (ns)")
        if kind == KERNEL:
            kernel_thread_ns = _metric(df, node, "thread time (ns)")
        base = kernel_thread_ns if kind == SCOPE else total
        share = time_ns / base if base and not math.isnan(base) and not math.isnan(time_ns) else math.nan
        mean = time_ns / count if count and not math.isnan(count) else math.nan
        if depth >= 0:
            label = node.frame.get("name") + (f"  [{node.frame.get('target')}]" if node.frame.get("target") else "")
            share_text = f"{share:7.1%}" if not math.isnan(share) else f"{'-':>7}"
            count_text = f"{int(count):>10}" if not math.isnan(count) else f"{'-':>10}"
            lines.append(f"{count_text} {_fmt_ns(time_ns):>12} {_fmt_ns(mean):>12} {share_text}  "
                         f"{'  ' * depth}{label}")
        for child in sorted(node.children, key=lambda c: -(_metric(df, c, "time (ns)") or 0)):
            visit(child, depth + 1, kernel_thread_ns)

    for root in roots:
        visit(root, -1, math.nan)
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m spine.proton.viewer", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("file", help="a .hatchet file written by Spine's profiler")
    args = parser.parse_args(argv)
    gf, counters = load_graphframe(args.file)
    print(render(gf, counters))
    return 0


if __name__ == "__main__":
    sys.exit(main())
