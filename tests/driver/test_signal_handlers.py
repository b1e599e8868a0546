"""The runtime's signal handlers cooperate with others: a fault signal a process sent is not a kernel fault,
the watchdog's signal number stays usable by others, and handlers installed after the runtime's (Python's
faulthandler) keep working while kernel faults stay kernel faults. Each case runs in a process of its own,
since it ends that process or changes its handlers."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PRELUDE = textwrap.dedent("""
    import ctypes, faulthandler, os, signal, sys, time
    import torch, triton
    from spine.driver import CPUDriver
    from spine.errors import KernelFault
    from tests.driver.test_faults import wild_store_kernel
    from tests.driver.test_stops import wait_for_flag_kernel
    from tests.kernels import add_kernel
    triton.runtime.driver.set_active(CPUDriver(target="host"))
    x = torch.rand(4)

    def wild_store():
        try:
            wild_store_kernel[(1,)](torch.zeros(64), 1 << 42, 64, BLOCK=64)
        except KernelFault as error:
            print("KernelFault:", error, flush=True)
""")


def _run(body: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(body)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, **kwargs)


def test_a_segv_sent_by_a_process_during_a_launch_is_not_a_kernel_fault():
    """kill -SEGV from outside, while the kernel runs: the default action (the process ends), not a
    KernelFault naming address 0."""
    proc = subprocess.Popen([sys.executable, "-c", PRELUDE + textwrap.dedent("""
        flag, out = torch.zeros(1, dtype=torch.int32), torch.zeros(2, dtype=torch.int32)
        wait_for_flag_kernel[(2,)](torch.ones(1, dtype=torch.int32), out)
        os.environ["SPINE_KERNEL_TIMEOUT"] = "20"
        print("launching", flush=True)
        try:
            wait_for_flag_kernel[(2,)](flag, out)
        except KernelFault as error:
            print("KernelFault:", error, flush=True)
    """)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "launching\n"
        time.sleep(1.0)
        os.kill(proc.pid, signal.SIGSEGV)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert "KernelFault" not in out
    assert proc.returncode == -signal.SIGSEGV


def test_the_watchdog_signal_reaches_a_handler_installed_before_the_runtime():
    """SIGRTMIN+6 is the watchdog's only when the watchdog sent it: any other goes to the handler that
    was there before, and the watchdog still stops kernels."""
    proc = _run("""
        seen = []
        signal.signal(signal.SIGRTMIN + 6, lambda signum, frame: seen.append(signum))
        add_kernel[(1,)](x, x, x, 4, BLOCK=4)           # loads the runtime, which installs its handlers
        os.kill(os.getpid(), signal.SIGRTMIN + 6)
        time.sleep(0.1)
        print("seen", len(seen), flush=True)
        os.environ["SPINE_KERNEL_TIMEOUT"] = "0.3"
        flag, out = torch.zeros(1, dtype=torch.int32), torch.zeros(2, dtype=torch.int32)
        try:
            wait_for_flag_kernel[(2,)](flag, out)
        except KernelFault as error:
            print("KernelFault:", error, flush=True)
        print("seen", len(seen), flush=True)
    """)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "seen 1"
    assert lines[1].startswith("KernelFault:") and "ran longer than SPINE_KERNEL_TIMEOUT" in lines[1]
    assert lines[2] == "seen 1"


@pytest.mark.parametrize("how", ["python", "behind_our_back"])
def test_faulthandler_enabled_after_the_runtime_keeps_working(how):
    """faulthandler.enable() after the runtime loaded put faulthandler in front: the first kernel fault
    printed "Fatal Python error" and faulthandler handed itself over to the runtime for good. The runtime
    puts its handlers back in front at once (Python's installers are watched) or, for a handler installed
    where it cannot see (here faulthandler's unwrapped function), within a thousand launches: kernel
    faults stay quiet KernelFaults, and a fault elsewhere still gets faulthandler's traceback."""
    enable = "faulthandler.enable()" if how == "python" else (
        "getattr(faulthandler.enable, '__wrapped__', faulthandler.enable)(); "
        "[add_kernel[(1,)](x, x, x, 4, BLOCK=4) for _ in range(1100)]")
    proc = _run(f"""
        add_kernel[(1,)](x, x, x, 4, BLOCK=4)
        {enable}
        wild_store()
        wild_store()
        print("next", flush=True)
        ctypes.string_at(8)
    """)
    lines = proc.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == ["KernelFault", "KernelFault", "next"], proc.stdout
    assert proc.stderr.count("Fatal Python error") == 1, proc.stderr
    after = proc.stderr.partition("Fatal Python error")[2]
    assert after.startswith(": Segmentation fault") and "string_at" in after, proc.stderr
    assert proc.returncode == -signal.SIGSEGV


def test_faulthandler_enabled_before_the_runtime_still_reports_faults_outside_kernels():
    proc = _run("""
        add_kernel[(1,)](x, x, x, 4, BLOCK=4)
        wild_store()
        ctypes.string_at(8)
    """, env={**os.environ, "PYTHONFAULTHANDLER": "1"})
    assert proc.stdout.startswith("KernelFault:")
    assert proc.stderr.count("Fatal Python error: Segmentation fault") == 1, proc.stderr
    assert proc.returncode == -signal.SIGSEGV
