"""The grid on the OpenMP threads a process already has (cpp/openmp_team.h), and the grid after fork: each
scenario runs in a process of its own, under a time limit, since the failure it guards against is a hang."""
import os
import subprocess
import sys
import tempfile
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PRELUDE = """
import os, sys, torch, triton, triton.language as tl
from spine.driver import CPUDriver
triton.runtime.driver.set_active(CPUDriver(target="host"))

@triton.jit
def ids_kernel(out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, offs + 1)

def run(programs=64, threads="2"):
    os.environ["SPINE_NUM_THREADS"] = threads
    out = torch.zeros(programs * 256, dtype=torch.int32)
    ids_kernel[(programs,)](out, BLOCK=256)
    assert torch.equal(out, torch.arange(1, programs * 256 + 1, dtype=torch.int32)), "wrong result"

def threads():
    return len(os.listdir("/proc/self/task"))
"""


def _run(script: str, env: dict | None = None, timeout: float = 180) -> str:
    # A file, not `-c`: @triton.jit reads the kernel's source.
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "scenario.py")
        with open(path, "w") as f:
            f.write(PRELUDE + textwrap.dedent(script))
        done = subprocess.run([sys.executable, path], capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                              env=dict(os.environ, SPINE_TARGET="host", PYTHONPATH=ROOT, **(env or {})))
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.parametrize("share", ["1", "0"])
def test_a_forked_child_launches_on_threads_of_its_own(share):
    """The parent's grid threads (its own pool's, or the OpenMP team's) do not exist in a child forked
    after they ran: the child's launches start threads of its own instead of waiting for them."""
    out = _run("""
        torch.set_num_threads(2)
        torch.ones(1 << 22).add_(1)
        run()
        pid = os.fork()
        if pid == 0:
            try:
                run()
                run(programs=3, threads="3")
                print("child ok", flush=True)
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        run()
        print("parent ok")
    """, {"SPINE_GRID_OPENMP": share})
    assert out.split() == ["child", "ok", "parent", "ok"]


def test_launches_run_on_the_openmp_threads_torch_already_has():
    """With torch's OpenMP team of two warm, a launch on two threads starts none of its own (a pool of
    the grid's own would start one worker beside the launching thread)."""
    script = """
        torch.set_num_threads(2)
        torch.ones(1 << 22).add_(1)
        run(threads="1")                     # compiles; starts the watchdog
        before = threads()
        run()
        torch.ones(1 << 22).add_(1)
        run()
        print(threads() - before)
    """
    assert _run(script, {"SPINE_GRID_OPENMP": "1"}).split() == ["0"]
    assert _run(script, {"SPINE_GRID_OPENMP": "0"}).split() == ["1"]


def test_team_threads_with_small_stacks_leave_their_programs_to_the_others():
    """Kernels keep tiles of up to 64 KiB on the stack; OpenMP threads given 128 KiB (OMP_STACKSIZE) take
    no programs, and the launch is still whole and right."""
    out = _run("""
        @triton.jit
        def tiles_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
            base = tl.program_id(0) * BLOCK
            offs = base + tl.arange(0, BLOCK)
            a = tl.load(x_ptr + offs)
            b = tl.sort(a)
            c = tl.cumsum(b, 0)
            tl.store(out_ptr + offs, c + tl.flip(b, 0))
        torch.set_num_threads(2)
        torch.ones(1 << 22).add_(1)
        os.environ["SPINE_NUM_THREADS"] = "2"
        n, block = 16, 8192
        x = torch.rand(n * block)
        out = torch.empty_like(x)
        tiles_kernel[(n,)](x, out, BLOCK=block)
        b = x.view(n, block).sort(dim=1).values
        expected = b.cumsum(1) + b.flip(1)
        torch.testing.assert_close(out.view(n, block), expected, rtol=1e-4, atol=1e-3)
        print("ok")
    """, {"OMP_STACKSIZE": "128K"})
    assert out.split() == ["ok"]
