"""Stopping a host launch (SPINE_KERNEL_TIMEOUT, Ctrl-C) never leaves the process broken: threads are stopped
only in kernel code or at the runtime's safe points (cpp/fault_guard.h); one that cannot be stopped there
poisons the runtime, and later launches refuse with a clear error. The timeout's value is read strictly."""
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
import torch
import triton
import triton.language as tl

from spine.errors import KernelFault
from tests.driver.test_errors import long_loop_kernel, wait_for_flag_kernel


@pytest.fixture(autouse=True)
def _host():
    from spine.driver import CPUDriver
    triton.runtime.driver.set_active(CPUDriver(target="host"))


@triton.jit
def print_until_flag_kernel(flag_ptr):
    count = 0
    while tl.load(flag_ptr) == 0:
        tl.device_print("count", count)
        count += 1


@triton.jit
def print_once_kernel(flag_ptr):
    tl.device_print("once", tl.load(flag_ptr))




_PRINTING_STOPPED = textwrap.dedent("""
    import os, sys
    import torch, triton
    from spine.driver import CPUDriver
    from spine.errors import KernelFault
    from tests.driver.test_stops import print_until_flag_kernel, print_once_kernel
    triton.runtime.driver.set_active(CPUDriver(target="host"))
    os.environ["SPINE_NUM_THREADS"] = sys.argv[1]
    flag = torch.ones(1, dtype=torch.int32)
    print_until_flag_kernel[(4,)](flag)
    print_once_kernel[(4,)](flag)
    flag[0] = 0
    os.environ["SPINE_KERNEL_TIMEOUT"] = "0.3"
    for _ in range(3):
        try:
            print_until_flag_kernel[(4,)](flag)
        except KernelFault as error:
            print("KernelFault:", error, file=sys.stderr, flush=True)
    os.environ["SPINE_KERNEL_TIMEOUT"] = "20"
    print("after", flush=True)
    try:
        print_once_kernel[(4,)](flag)
    except KernelFault as error:
        print("KernelFault:", error, file=sys.stderr, flush=True)
""")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("threads", ["1", "2"])
def test_a_printing_kernel_stopped_leaves_printing_working(tmp_path, threads):
    """Most of a printing kernel's time is in the print lock and stdio: a stop there left the lock held,
    and the next printing launch hung. In a process of its own, so that a hang fails rather than hangs."""
    with open(tmp_path / "out.txt", "w") as out:
        proc = subprocess.run([sys.executable, "-c", _PRINTING_STOPPED, threads], cwd=ROOT, stdout=out,
                              stderr=subprocess.PIPE, text=True, timeout=300)
    stops = proc.stderr.splitlines()
    assert len(stops) == 3 and all("ran longer than SPINE_KERNEL_TIMEOUT" in line for line in stops), proc.stderr
    assert not any("C library or the runtime" in line for line in stops)
    after = (tmp_path / "out.txt").read_text().split("after\n")[1]
    assert sorted(after.splitlines()) == [f"pid ({i}, 0, 0) once: 0" for i in range(4)]


_BLOCKED_IN_WRITE = textwrap.dedent("""
    import os, sys
    import torch, triton
    from spine.driver import CPUDriver
    from spine.errors import KernelFault
    from tests.driver.test_stops import print_until_flag_kernel, print_once_kernel
    from tests.kernels import add_kernel
    triton.runtime.driver.set_active(CPUDriver(target="host"))
    report = open(sys.argv[1], "w")
    flag = torch.ones(1, dtype=torch.int32)
    print_until_flag_kernel[(1,)](flag)
    x = torch.rand(4)
    add_kernel[(1,)](x, x, x, 4, BLOCK=4)
    flag[0] = 0
    os.environ["SPINE_KERNEL_TIMEOUT"] = "0.2"
    for launch in (lambda: print_until_flag_kernel[(1,)](flag), lambda: add_kernel[(1,)](x, x, x, 4, BLOCK=4)):
        try:
            launch()
            report.write("completed\\n")
        except Exception as error:
            report.write(f"{type(error).__name__}: {error}\\n")
    report.close()
    os._exit(0)   # stdout is a full pipe: nothing may flush it
""")


def test_a_kernel_blocked_in_the_c_library_poisons_the_runtime(tmp_path):
    """A kernel printing to a pipe nobody reads blocks for good in write(), holding the print lock: it is
    stopped anyway after a few watchdog periods, and every later launch refuses."""
    report = tmp_path / "report.txt"
    proc = subprocess.Popen([sys.executable, "-c", _BLOCKED_IN_WRITE, str(report)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert proc.wait(timeout=300) == 0
    finally:
        proc.kill()
        proc.stdout.close()
    stopped, refused = report.read_text().splitlines()
    assert stopped.startswith("KernelFault:") and "ran longer than SPINE_KERNEL_TIMEOUT" in stopped
    assert "inside the C library or the runtime" in stopped and "restarted" in stopped
    assert refused.startswith("RuntimeError:") and "restart the process" in refused


@pytest.mark.parametrize("value", ["inf", "1e10", "9.5e9", "Infinity", " 1e300 "])
def test_a_timeout_beyond_any_deadline_means_none(monkeypatch, value):
    """(int64_t)(seconds * 1e9) overflowed to a deadline in the past: every launch longer than the
    watchdog's first look (a millisecond or two) was stopped. This one runs some 100 ms."""
    out = torch.zeros(1)
    long_loop_kernel[(1,)](out, 3)
    monkeypatch.setenv("SPINE_KERNEL_TIMEOUT", value)
    started = time.monotonic()
    long_loop_kernel[(1,)](out, 2**26)
    assert out.item() == 2.0
    assert time.monotonic() - started > 0.01   # long enough to be stopped, were there a deadline


def test_a_tiny_timeout_is_still_a_timeout(monkeypatch):
    """1e-12 s used to round to 0 ns, which means no timeout."""
    out = torch.zeros(1)
    long_loop_kernel[(1,)](out, 3)
    monkeypatch.setenv("SPINE_KERNEL_TIMEOUT", "1e-12")
    with pytest.raises(KernelFault, match="ran longer than SPINE_KERNEL_TIMEOUT"):
        long_loop_kernel[(1,)](out, 2**26)


@pytest.mark.parametrize("value", ["nan", "-1", "-inf", "ten", "0x10", "1_0", "1e", "."])
def test_an_invalid_timeout_is_refused(monkeypatch, value):
    """The runtime read what strtod made of it: NaN, negative or garbage meant no timeout, silently; a hex
    float meant a timeout Python reads as an error."""
    flag, out = torch.ones(1, dtype=torch.int32), torch.zeros(1, dtype=torch.int32)
    wait_for_flag_kernel[(1,)](flag, out)
    monkeypatch.setenv("SPINE_KERNEL_TIMEOUT", value)
    with pytest.raises(ValueError, match="SPINE_KERNEL_TIMEOUT"):
        wait_for_flag_kernel[(1,)](flag, out)
    monkeypatch.setenv("SPINE_KERNEL_TIMEOUT", " 2.5 ")
    wait_for_flag_kernel[(1,)](flag, out)


def test_a_grid_too_large_to_count_is_refused(monkeypatch):
    """gx * gy * gz overflowed int64: (2**31 - 1) ** 3 wrapped to a positive count and the launch ran
    programs (here with no arguments: it faulted)."""
    flag, out = torch.ones(1, dtype=torch.int32), torch.zeros(1, dtype=torch.int32)
    function = wait_for_flag_kernel[(1,)](flag, out).function
    monkeypatch.setenv("SPINE_KERNEL_TIMEOUT", "5")
    rc = function.runtime.run_grid(function.entry, None, (2**31 - 1,) * 3, 1)
    with pytest.raises(ValueError, match="more program instances than a launch can count"):
        function.check(rc)


@pytest.fixture
def sigint_raises():
    """As tests/driver/test_interruptions.py: a process started without job control ignores SIGINT."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def _interrupted_launch(threads: str, monkeypatch) -> None:
    """A launch that never ends on its own, with a SIGINT 0.3 s in; fails unless it ends within seconds."""
    monkeypatch.setenv("SPINE_NUM_THREADS", threads)
    monkeypatch.setenv("SPINE_KERNEL_TIMEOUT", "15")   # before Ctrl-C could stop a launch: a failure, not a hang
    flag, out = torch.zeros(1, dtype=torch.int32), torch.zeros(4, dtype=torch.int32)
    wait_for_flag_kernel[(4,)](torch.ones(1, dtype=torch.int32), out)
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    started = time.monotonic()
    timer.start()
    try:
        wait_for_flag_kernel[(4,)](flag, out)
    finally:
        timer.join()
        # Python raised KeyboardInterrupt once the launch returned, even when the launch was not stopped
        assert time.monotonic() - started < 10, "the launch ran on after Ctrl-C"


@pytest.mark.parametrize("threads", ["1", "2"])
def test_ctrl_c_stops_a_running_launch(sigint_raises, monkeypatch, threads):
    with pytest.raises(KeyboardInterrupt):
        _interrupted_launch(threads, monkeypatch)
    flag, out = torch.ones(1, dtype=torch.int32), torch.full((4,), -1, dtype=torch.int32)
    wait_for_flag_kernel[(4,)](flag, out)
    assert out.tolist() == [0, 0, 0, 0]


def test_ctrl_c_stops_a_launch_after_python_replaced_the_handler(monkeypatch):
    """signal.signal(SIGINT, ...) after the runtime loaded replaces the runtime's handler with Python's:
    the runtime puts its own back in front. A Python handler that does not raise still sees the signal,
    and the stopped launch raises KeyboardInterrupt."""
    seen = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: seen.append(signum))
    try:
        with pytest.raises(KeyboardInterrupt, match="stopped by Ctrl-C"):
            _interrupted_launch("2", monkeypatch)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert seen == [signal.SIGINT]
