"""Running on a board (SPINE_REMOTE): tested with a stand-in board, a local shell that runs the riscv64
kernel server under QEMU user mode (SPINE_REMOTE_RUNNER). Everything else is the remote path as a board
sees it: the server and kernels copied through the stream, arguments and results as byte ranges."""
import os
import signal
import threading

import pytest
import torch
import triton
import triton.language as tl

from spine import switches
from spine.driver import CPUDriver
from spine.driver.cpu_driver import _executor_for
from spine.driver.qemu import GUEST_SYSROOT, qemu_binary
from spine.driver.remote import RemoteExecutor
from spine.driver.remote_link import RemoteConnectionLost
from spine.errors import KernelFault
from spine.targets import riscv64_target
from tests.driver.test_errors import long_loop_kernel
from tests.driver.test_faults import QEMU_STORE_FAULT, wild_store_kernel
from tests.kernels import add_kernel


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 3.0, mask=offs < n)


@pytest.fixture
def board(tmp_path, monkeypatch):
    """The executor SPINE_REMOTE selects, reaching a fresh stand-in board."""
    monkeypatch.setenv("SPINE_TARGET", "riscv64")
    monkeypatch.setenv("SPINE_REMOTE", f"env XDG_CACHE_HOME={tmp_path / 'board'} sh")
    monkeypatch.setenv("SPINE_REMOTE_RUNNER", f"{qemu_binary()} -L {GUEST_SYSROOT} -cpu {switches.QEMU_CPU.get()}")
    triton.runtime.driver.set_active(CPUDriver(target="riscv64"))
    executor = _executor_for(riscv64_target())
    assert isinstance(executor, RemoteExecutor)
    yield executor
    executor.shutdown()


def _add_works():
    x = torch.rand(300)
    out = torch.empty(300)
    add_kernel[(3,)](x, x, out, 300, BLOCK=128)
    torch.testing.assert_close(out, 2 * x)


def test_kernels_run_on_the_board(board, tmp_path):
    x, y = torch.rand(1000), torch.rand(1000)
    out = torch.empty(1000)
    add_kernel[(8,)](x, y, out, 1000, BLOCK=128)
    torch.testing.assert_close(out, x + y)
    assert board.traffic.connections == 1 and board.traffic.files_sent == 1
    files = os.listdir(tmp_path / "board" / "spine-remote")
    assert sum(f.startswith("kernel-server-") for f in files) == 1
    assert sum(f.startswith("kernel-") and f.endswith(".so") for f in files) == 1


def test_only_the_argument_ranges_travel(board):
    storage = torch.rand(4096)
    x = storage[1000:1500]            # a view: only its 500 elements go out
    out = torch.zeros(4096)[:500]
    before_out, before_in = board.traffic.bytes_out, board.traffic.bytes_in
    scale_kernel[(4,)](x, out, 500, BLOCK=128)
    torch.testing.assert_close(out, 3 * x)
    assert board.traffic.bytes_out - before_out == 2 * 500 * 4   # x, and out (its unwritten bytes stay)
    assert board.traffic.bytes_in - before_in == 500 * 4         # only what the kernel may write


def test_files_are_copied_once(board):
    _add_works()
    board.shutdown()                 # a new connection finds the server and the kernel on the board
    _add_works()
    assert board.traffic.connections == 2 and board.traffic.files_sent == 1


def test_a_fault_raises_and_the_next_launch_works(board):
    out = torch.zeros(64 * 4)
    with pytest.raises(KernelFault, match="wild_store_kernel.*crashed on the board.*" + QEMU_STORE_FAULT):
        wild_store_kernel[(4,)](out, 1 << 42, 64 * 4, BLOCK=64)
    _add_works()


def test_a_hung_kernel_times_out(board, monkeypatch):
    out = torch.empty(1)
    long_loop_kernel[(1,)](out, 3)
    monkeypatch.setenv("SPINE_KERNEL_TIMEOUT", "2")
    with pytest.raises(KernelFault, match="did not answer within 2 s"):
        long_loop_kernel[(1,)](out, 2**31 - 1)
    long_loop_kernel[(1,)](out, 3)
    assert out.item() == 1.75


def test_a_dropped_connection_raises_and_the_next_launch_reconnects(board):
    out = torch.empty(1)
    long_loop_kernel[(1,)](out, 3)
    link = board.server.link
    timer = threading.Timer(2.0, lambda: os.killpg(link.proc.pid, signal.SIGKILL))
    timer.start()
    try:
        with pytest.raises(RemoteConnectionLost, match="long_loop_kernel.*connection to the board ended"):
            long_loop_kernel[(1,)](out, 2**31 - 1)
    finally:
        timer.cancel()
    long_loop_kernel[(1,)](out, 3)
    assert out.item() == 1.75 and board.traffic.connections == 2


def test_a_remote_that_is_no_shell_is_reported(monkeypatch):
    from spine.driver.remote import RemoteServer
    with pytest.raises(RemoteConnectionLost, match="connection to the board ended.*SPINE_REMOTE=.true., exit status 0"):
        RemoteServer("true", "")


@triton.jit
def print_kernel(x_ptr):
    tl.device_print("x", tl.load(x_ptr + tl.arange(0, 2)))


def test_device_prints_come_back_on_stderr(board, capsys):
    import time
    print_kernel[(1,)](torch.tensor([1.5, 2.5]))
    deadline = time.monotonic() + 10
    err = ""
    while "idx (1) x: 2.5" not in err and time.monotonic() < deadline:
        time.sleep(0.1)
        err += capsys.readouterr().err
    assert "pid (0, 0, 0) idx (0) x: 1.5" in err and "idx (1) x: 2.5" in err
