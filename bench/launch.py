"""Launch overhead: what one launch of a cached one-element vector add costs, beside torch's one-element add.

    .venv/bin/python bench/launch.py [--rounds N]

Prints a markdown table for both targets. Each figure is per call, over `rounds` rounds of many calls:
the best round and the median round of wall time, and of the launching thread's CPU time (time.thread_time:
what the launch itself spends, whatever else the machine is doing). Rows:
- Spine launch: `add_kernel[(1,)](x, y, out, 1, BLOCK=16)` through triton, as users call it.
- triton's own share: the same call with Spine's launcher replaced by a no-op (triton's binder, cache
  lookup and its driver calls, our device index among them).
- Python launcher: the same call through CPULauncher alone, without the fast path (cpp/launch.cpp).
- riscv64 only: the kernel server round trip (a PING: the pipes and QEMU's wake-up, no kernel), and the
  arena copies of a large launch measured apart (memmove of the bytes it copies in and back).

bench/run.py takes `rows(target, quick)` from here for its kernel table."""
from __future__ import annotations

import argparse
import ctypes
import os
import platform
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))


def per_call(fn, calls: int, rounds: int) -> dict:
    """Best and median round of wall and thread CPU microseconds per call."""
    fn()
    wall, cpu = [], []
    for _ in range(rounds):
        w, c = time.perf_counter(), time.thread_time()
        for _ in range(calls):
            fn()
        cpu.append((time.thread_time() - c) / calls * 1e6)
        wall.append((time.perf_counter() - w) / calls * 1e6)
    return {"wall_min": min(wall), "wall_median": statistics.median(wall), "cpu_min": min(cpu),
            "cpu_median": statistics.median(cpu)}


def _one_element():
    import torch
    x, y, out = torch.rand(1), torch.rand(1), torch.empty(1)
    return x, y, out


def _variant(kernel_fn, run_factory, x, y, out):
    """A fresh JIT function for the add kernel whose compiled kernel launches through run_factory(compiled)."""
    import triton
    jit = triton.jit(kernel_fn)
    compiled = jit[(1,)](x, y, out, 1, BLOCK=16)
    compiled._run = run_factory(compiled)
    return lambda: jit[(1,)](x, y, out, 1, BLOCK=16)


def measure(target: str, rounds: int) -> list[tuple[str, dict, str]]:
    import torch
    import triton
    from spine.driver import CPUDriver
    from spine.driver.launcher import CPULauncher
    from tests.kernels import add_kernel
    triton.runtime.driver.set_active(CPUDriver(target=target))
    emulated = target == "riscv64" and platform.machine() != "riscv64"
    calls = 300 if emulated else 2000
    x, y, out = _one_element()
    compiled = add_kernel[(1,)](x, y, out, 1, BLOCK=16)
    assert torch.equal(out, x + y)
    launcher = type(compiled.run).__name__
    rows = [("torch one-element add", per_call(lambda: torch.add(x, y, out=out), calls, rounds), "")]
    rows.append(("Spine launch", per_call(lambda: add_kernel[(1,)](x, y, out, 1, BLOCK=16), calls, rounds),
                 launcher))
    rows.append(("triton's own share", per_call(_variant(add_kernel.fn, lambda c: (lambda *a: None), x, y, out),
                                                calls, rounds), "launcher replaced by a no-op"))
    rows.append(("Python launcher", per_call(_variant(add_kernel.fn, lambda c: CPULauncher(c.src, c.metadata),
                                                      x, y, out), calls, rounds), "CPULauncher, no fast path"))
    if emulated:
        rows += _qemu_rows(calls, rounds)
    return rows


def _qemu_rows(calls: int, rounds: int) -> list[tuple[str, dict, str]]:
    import torch
    import triton
    from spine.driver import kernel_protocol as protocol
    from spine.driver.cpu_driver import _executor_for
    from spine.targets import riscv64_target
    from tests.kernels import add_kernel
    server = _executor_for(riscv64_target()).server
    rows = [("kernel server round trip", per_call(lambda: server.request(protocol.CMD_PING, b""), calls, rounds),
             "PING: pipes and QEMU's wake-up, no kernel")]
    n = 1 << 20
    x, y, out = torch.rand(n), torch.rand(n), torch.empty(n)
    add_kernel[(triton.cdiv(n, 4096),)](x, y, out, n, BLOCK=4096)
    torch.testing.assert_close(out, x + y)
    scratch = torch.empty(3 * n)
    into, back = scratch.data_ptr(), out.data_ptr()

    def copies():  # what the launch copies: three 4 MiB spans in, the written one back
        for i, t in enumerate((x, y, out)):
            ctypes.memmove(into + i * 4 * n, t.data_ptr(), 4 * n)
        ctypes.memmove(back, into + 2 * 4 * n, 4 * n)
    rows.append((f"arena copies, vector add n=2^20", per_call(copies, 5, rounds), "16 MiB: 12 in, 4 back"))
    rows.append((f"Spine launch, vector add n=2^20", per_call(
        lambda: add_kernel[(triton.cdiv(n, 4096),)](x, y, out, n, BLOCK=4096), 5, rounds), "copies and kernel"))
    return rows


def rows(target: str, quick: bool):
    """bench/run.py's rows: the one-element launch against torch's one-element add."""
    import torch
    from run import Row
    from tests.kernels import add_kernel
    x, y, out = _one_element()
    yield Row("launch: one-element vector add", lambda: add_kernel[(1,)](x, y, out, 1, BLOCK=16),
              lambda: torch.add(x, y, out=out), 1e9, "launches/s")


def table(results: dict) -> str:
    lines = ["| target | what | wall µs, best round | wall µs, median round | thread CPU µs, best | "
             "thread CPU µs, median | note |", "|---|---|---|---|---|---|---|"]
    for target, rows_ in results.items():
        for name, r, note in rows_:
            lines.append(f"| {target} | {name} | {r['wall_min']:.1f} | {r['wall_median']:.1f} | {r['cpu_min']:.1f} "
                         f"| {r['cpu_median']:.1f} | {note} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--target", choices=("host", "riscv64"), action="append")
    args = parser.parse_args()
    results = {target: measure(target, args.rounds) for target in (args.target or ("host", "riscv64"))}
    print(table(results))
    print(f"\n{platform.machine()}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
