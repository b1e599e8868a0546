"""Nothing outlives the Python process that started it: not the QEMU guest server (also in the middle
of a kernel), not the compile workers, not a shared-memory file, even when the process is killed."""
import os
import platform
import signal
import subprocess
import sys
import time

import pytest

CHILD = r"""
import torch, triton
from spine.driver import CPUDriver
from spine.driver.cpu_driver import _executor_for
from spine.targets import riscv64_target
from spine.compiler.compile_worker import pool
from tests.kernels import add_kernel
from tests.driver.test_errors import long_loop_kernel as spin_kernel

triton.runtime.driver.set_active(CPUDriver(target="riscv64"))
x = torch.rand(8); add_kernel[(1,)](x, x, x, 8, BLOCK=8)
out = torch.empty(1); spin_kernel[(1,)](out, 3)
server = _executor_for(riscv64_target()).server.proc.pid
pool().run("selftest", action="pid")  # a compile worker exists even when every kernel was cached
workers = [w.proc.pid for w in pool().idle]
print(server, *workers, flush=True)
spin_kernel[(1,)](out, 2**31 - 1)   # killed while the guest runs this
"""


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            return any(line.startswith("State:") and line.split()[1] in ("Z", "X") for line in f)
    except FileNotFoundError:
        return True


@pytest.mark.skipif(platform.machine() == "riscv64", reason="the guest server exists only under QEMU")
def test_sigkill_leaves_no_guest_server_worker_or_shared_memory():
    shm_before = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True, cwd=root,
                             env=dict(os.environ, PYTHONPATH=root))
    pids = [int(p) for p in child.stdout.readline().split()]
    assert len(pids) >= 2, "the child should report its guest server and a compile worker"
    time.sleep(0.5)  # the guest is now inside the endless kernel
    child.send_signal(signal.SIGKILL)
    child.wait()
    deadline = time.time() + 15
    while time.time() < deadline and not all(_gone(p) for p in pids):
        time.sleep(0.1)
    assert [p for p in pids if not _gone(p)] == []
    shm_after = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    assert {name for name in shm_after - shm_before if "spine" in name} == set()


def test_temporary_files_of_dead_writers_are_reaped(tmp_path, monkeypatch):
    from spine import cache
    monkeypatch.setenv("SPINE_CACHE_DIR", str(tmp_path))
    kernels = tmp_path / "kernels"
    kernels.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    left_by_the_dead = kernels / f"{cache.TEMPORARY_PREFIX}{dead.pid}-abc"
    being_written = kernels / f"{cache.TEMPORARY_PREFIX}{os.getpid()}-def"
    left_by_the_dead.write_bytes(b"partial")
    being_written.write_bytes(b"partial")
    cache.cache_dir()
    assert not left_by_the_dead.exists()
    assert being_written.exists()
