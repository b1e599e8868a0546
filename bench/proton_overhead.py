"""What Proton costs on the CPU: the same elementwise kernel launched plain and with proton scopes, for a
small and a large grid, on each target.

    .venv/bin/python bench/proton_overhead.py [--quick]

The instrumented kernel marks three scopes (load, compute, store) per program; its launches run profiled
(every program and scope recorded, the block read back and parsed into a Launch). Two measures:
  launch                  wall time per launch seen from Python (median over rounds of a batch's mean):
                          everything the user pays, Python and (riscv64) the guest round trip included;
  kernel in the runtime   the grid alone, as the runtime's counter timed it (median over launches); the
                          plain kernel is timed under PROTON_KERNEL_CAPTURE=1, which adds no records
                          inside the grid, only the two counter reads around it.
Plain and instrumented batches alternate in order each round, so drift on a shared machine hits both
alike. Prints a markdown table (bench/RESULTS.md keeps the latest)."""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch
import triton
import triton.language as tl
import triton.profiler.language as pl
from triton.profiler.flags import flags

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from spine.driver import CPUDriver  # noqa: E402
from spine.proton import profiler  # noqa: E402
from spine.proton.capture import capture_session  # noqa: E402

pl.enable_semantic("triton")
flags.instrumentation_on = True


@triton.jit
def plain_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = x * 1.5 + 0.25
    tl.store(out_ptr + offs, y, mask=mask)


@triton.jit
def scoped_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    pl.enter_scope("load")
    x = tl.load(x_ptr + offs, mask=mask)
    pl.exit_scope("load")
    pl.enter_scope("compute")
    y = x * 1.5 + 0.25
    pl.exit_scope("compute")
    pl.enter_scope("store")
    tl.store(out_ptr + offs, y, mask=mask)
    pl.exit_scope("store")


@triton.jit
def records_only_kernel(out_ptr, STEPS: tl.constexpr):
    """Nothing but scopes: the kernel's time over its records is what one record costs."""
    for _ in range(STEPS):
        pl.enter_scope("empty")
        pl.exit_scope("empty")
    tl.store(out_ptr, 1.0)


# (label, elements, BLOCK) per target; QEMU emulates RVV tens of times slower, so its large case is smaller.
SIZES = {"host": [("small", 4096, 1024), ("large", 1 << 24, 4096)],
         "riscv64": [("small", 4096, 1024), ("large", 1 << 20, 4096)]}


def _batch(launch, count: int) -> float:
    """Seconds per launch over `count` launches in a row."""
    start = time.perf_counter()
    for _ in range(count):
        launch()
    return (time.perf_counter() - start) / count


def _runtime_times(session) -> list:
    """Kernel times the runtime measured (counter ticks around the grid), in seconds; empties the session."""
    times = [launch.duration_ns * 1e-9 for launch in session.launches]
    session.reset()
    return times


def measure(target: str, n: int, block: int, rounds: int, batch: int) -> dict:
    triton.runtime.driver.set_active(CPUDriver(target=target))
    x = torch.rand(n)
    out = torch.empty(n)
    grid = (triton.cdiv(n, block),)
    plain = lambda: plain_kernel[grid](x, out, n, BLOCK=block)  # noqa: E731
    scoped = lambda: scoped_kernel[grid](x, out, n, BLOCK=block)  # noqa: E731
    for launch in (plain, scoped):
        launch()  # compile, load, warm up
    records = len(profiler.session.launches[-1].records)
    profiler.reset()
    wall = {"plain": [], "scoped": []}
    runtime = {"plain": [], "scoped": []}
    for round_ in range(rounds):
        # alternate the order, so drift on this shared machine hits both alike
        for variant in (("plain", "scoped") if round_ % 2 == 0 else ("scoped", "plain")):
            if variant == "plain":
                wall["plain"].append(_batch(plain, batch))
                os.environ["PROTON_KERNEL_CAPTURE"] = "1"  # launch-level records: the kernel's own time
                _batch(plain, batch)
                del os.environ["PROTON_KERNEL_CAPTURE"]
                runtime["plain"] += _runtime_times(capture_session())
            else:
                wall["scoped"].append(_batch(scoped, batch))
                runtime["scoped"] += _runtime_times(profiler.session)
    torch.testing.assert_close(out, x * 1.5 + 0.25)
    result = {f"{kind}_{variant}": statistics.median(values)
              for kind, table in (("wall", wall), ("runtime", runtime)) for variant, values in table.items()}
    result.update(programs=grid[0], records=records)
    return result


def record_cost(target: str, steps: int = 10000, rounds: int = 20) -> float:
    """Seconds per record (one enter_scope and exit_scope pair), one program on one thread."""
    triton.runtime.driver.set_active(CPUDriver(target=target))
    out = torch.zeros(1)
    records_only_kernel[(1,)](out, STEPS=steps)
    profiler.reset()
    for _ in range(rounds):
        records_only_kernel[(1,)](out, STEPS=steps)
    times = [launch.duration_ns * 1e-9 / (steps + 1) for launch in profiler.session.launches]
    assert all(len(launch.records) == steps + 1 for launch in profiler.session.launches)
    profiler.reset()
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    args = parser.parse_args()
    print("| target | kernel | programs | records per launch | launch, plain | launch, instrumented "
          "| instrumented / plain | kernel in the runtime, plain | instrumented | instrumented / plain |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for target, sizes in SIZES.items():
        for label, n, block in sizes:
            rounds, batch = (40, 50) if label == "small" else (20, 2)
            if args.quick:
                rounds = max(2, rounds // 4)
            r = measure(target, n, block, rounds, batch)
            print(f"| {target} | {label}: n={n}, BLOCK={block} | {r['programs']} | {r['records']} "
                  f"| {_ms(r['wall_plain'])} | {_ms(r['wall_scoped'])} | {r['wall_scoped'] / r['wall_plain']:.2f} "
                  f"| {_ms(r['runtime_plain'])} | {_ms(r['runtime_scoped'])} "
                  f"| {r['runtime_scoped'] / r['runtime_plain']:.2f} |", flush=True)
    print()
    print("| target | one record (enter_scope + exit_scope), inside the grid |")
    print("|---|---|")
    for target in SIZES:
        print(f"| {target} | {record_cost(target) * 1e9:.1f} ns |", flush=True)


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms"


if __name__ == "__main__":
    main()
