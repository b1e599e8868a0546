"""Scopes inside kernels: recorded per program and thread, nested, inside their kernel's time."""
import torch
import triton

from spine.proton import profiler

from .kernels import looped_kernel, scoped_kernel

N, BLOCK = 3000, 256


def _profiled_launch(grid=(4, 3)):
    x = torch.rand(N)
    out = torch.empty(N)
    with profiler.profile(auto_dump=False):
        scoped_kernel[grid](x, out, N, BLOCK=BLOCK)
    covered = min(N, grid[0] * grid[1] * BLOCK)
    torch.testing.assert_close(out[:covered], x[:covered] * 2 + 1)
    (launch,) = profiler.session.launches
    return launch


def test_every_program_records_its_scopes(target, instrumentation):
    launch = _profiled_launch()
    programs = launch.programs()
    assert sorted(p.program for p in programs) == sorted((x, y, 0) for x in range(4) for y in range(3))
    for name in ("outer", "load", "compute", "store"):
        scopes = [s for s in launch.scopes() if s.name == name]
        assert sorted(s.program for s in scopes) == sorted(p.program for p in programs), name
    assert launch.unmatched == 0 and launch.dropped == 0
    assert {s.thread for s in launch.intervals()} <= set(range(launch.threads))


def test_scopes_nest_inside_their_program_and_kernel(target, instrumentation):
    launch = _profiled_launch()
    program_of = {(p.program, p.thread): p for p in launch.programs()}
    for scope in launch.scopes():
        program = program_of[(scope.program, scope.thread)]
        assert program.start <= scope.start <= scope.end <= program.end
        assert scope.depth == (1 if scope.name == "outer" else 2)
    outer = {s.program: s for s in launch.scopes() if s.name == "outer"}
    for scope in launch.scopes():
        if scope.name != "outer":
            assert outer[scope.program].start <= scope.start <= scope.end <= outer[scope.program].end
            assert outer[scope.program].thread == scope.thread
    for program in launch.programs():
        assert launch.start <= program.start <= program.end <= launch.end
    assert launch.scope_paths()[:5] in ([(), ("outer",), ("outer", "load"), ("outer", "compute"),
                                        ("outer", "store")],)


def test_scopes_sum_to_no_more_than_the_kernel(target, instrumentation):
    launch = _profiled_launch()
    kernel_ticks = launch.end - launch.start
    for thread in {s.thread for s in launch.intervals()}:
        outer = sum(s.end - s.start for s in launch.scopes() if s.thread == thread and s.depth == 1)
        inner = sum(s.end - s.start for s in launch.scopes() if s.thread == thread and s.depth == 2)
        programs = sum(p.end - p.start for p in launch.programs() if p.thread == thread)
        assert inner <= outer <= programs <= kernel_ticks
    results = profiler.get_results()["kernels"]["scoped_kernel[4,3,1]"]
    assert sum(s["total_ns"] for name, s in results["scopes"].items() if "/" in name) \
        <= results["scopes"]["outer"]["total_ns"] <= results["thread_time_ns"]
    assert results["thread_time_ns"] <= results["total_ns"] * launch.threads


def test_a_scope_in_a_loop_is_recorded_each_iteration(target, instrumentation):
    x = torch.rand(2 * 64)
    out = torch.empty_like(x)
    with profiler.profile(auto_dump=False):
        looped_kernel[(2,)](x, out, STEPS=5, BLOCK=64)
    torch.testing.assert_close(out, x * sum(range(5)))
    (launch,) = profiler.session.launches
    steps = [s for s in launch.scopes() if s.name == "step"]
    assert len(steps) == 2 * 5
    assert all(s.start <= s.end for s in steps)
    for program in (0, 1):  # iterations follow each other within their program
        mine = sorted((s for s in steps if s.program == (program, 0, 0)), key=lambda s: s.start)
        assert all(a.end <= b.start for a, b in zip(mine, mine[1:]))


def test_instrumented_launches_are_kept_before_start(target, instrumentation):
    # spine-triton's reset(); kernel[grid](...); dump() works without start()
    x = torch.rand(N)
    out = torch.empty(N)
    profiler.reset()
    scoped_kernel[(2, 1)](x, out, N, BLOCK=BLOCK)
    assert len(profiler.session.launches) == 1
    assert profiler.get_results()["kernels"]["scoped_kernel[2,1,1]"]["scopes"]["outer"]["count"] == 2


def test_counter_is_named_with_its_unit_and_frequency(target, instrumentation):
    launch = _profiled_launch(grid=(1, 1))
    counter = launch.counter
    assert counter.hz > 1e6
    if target == "riscv64":
        assert counter.name == "rdtime" and counter.emulated
        assert "QEMU user mode" in counter.describe() and "host" in counter.describe()
    else:
        assert counter.name in ("rdtsc", "cntvct_el0", "rdtime") and not counter.emulated
    assert "not" in counter.measures and "cycles" in counter.measures  # says what it is not
    assert counter.as_dict()["unit"] == "ticks" and counter.as_dict()["frequency_hz"] == counter.hz
