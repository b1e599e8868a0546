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


def _board_files(tmp_path):
    return tmp_path / "board" / "spine-remote"


def _server_name() -> str:
    import hashlib
    from spine.driver.remote import board_kernel_server
    with open(board_kernel_server(), "rb") as f:
        return f"kernel-server-{hashlib.sha256(f.read()).hexdigest()[:16]}"


def test_a_damaged_server_on_the_board_is_replaced_not_run(board, tmp_path):
    # an empty executable under the server's name: what a full disk left when decoding failed
    cache = _board_files(tmp_path)
    cache.mkdir(parents=True)
    damaged = cache / _server_name()
    damaged.write_bytes(b"")
    damaged.chmod(0o755)
    _add_works()
    from spine.driver.remote import board_kernel_server
    assert damaged.read_bytes() == open(board_kernel_server(), "rb").read()


def test_a_damaged_kernel_file_on_the_board_is_copied_again(board, tmp_path):
    _add_works()
    board.shutdown()
    [kernel] = [f for f in _board_files(tmp_path).iterdir() if f.name.endswith(".so")]
    kernel.write_bytes(kernel.read_bytes()[:100])   # cut short under its final name
    _add_works()
    assert board.traffic.connections == 2 and board.traffic.files_sent == 2


def test_a_failed_install_leaves_nothing_installed(board, tmp_path, monkeypatch):
    fake = tmp_path / "fake-bin"
    fake.mkdir()
    (fake / "base64").write_text("#!/bin/sh\ncat > /dev/null\necho 'base64: write error: No space left on device' >&2\n"
                                 "exit 1\n")
    (fake / "base64").chmod(0o755)
    monkeypatch.setenv("SPINE_REMOTE", f"env PATH={fake}:{os.environ['PATH']} XDG_CACHE_HOME={tmp_path / 'board'} sh")
    with pytest.raises(RemoteConnectionLost, match="could not be installed.*No space left"):
        _add_works()
    assert os.listdir(_board_files(tmp_path)) == []   # neither the server nor its temporary copy
    monkeypatch.setenv("SPINE_REMOTE", f"env XDG_CACHE_HOME={tmp_path / 'board'} sh")
    _add_works()


def test_two_first_connections_install_the_server_side_by_side(tmp_path):
    from spine.driver.remote import RemoteServer
    from tests.driver.test_kernel_server import board_command
    servers, errors = [], []

    def connect():
        try:
            servers.append(RemoteServer(*board_command(str(tmp_path / "board"))))
        except Exception as error:   # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=connect) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert not errors and len(servers) == 2
        assert all(s.request(3, b"") == b"" for s in servers)   # PING
        assert os.listdir(_board_files(tmp_path)) == [_server_name()]
    finally:
        for server in servers:
            server.close()


def test_a_full_kernel_table_connects_anew_and_loads_again(board, monkeypatch):
    monkeypatch.setenv("SPINE_SERVER_KERNEL_SLOTS", "1")
    board.shutdown()
    _add_works()
    x = torch.rand(300)
    out = torch.empty(300)
    scale_kernel[(3,)](x, out, 300, BLOCK=128)   # a second kernel: the table of one is full
    torch.testing.assert_close(out, 3 * x)
    _add_works()
    assert board.traffic.connections == 3


def test_a_reply_longer_than_its_request_closes_the_connection(board):
    import struct
    from spine.driver import kernel_protocol as protocol
    _add_works()
    server = board.server
    pipe_r, pipe_w = os.pipe()   # the board's side of the stream, answering a PING with a 1 GiB length
    os.write(pipe_w, struct.pack("<iI", 0, 1 << 30))
    server.link.proc.stdout = os.fdopen(pipe_r, "rb", buffering=0)
    with pytest.raises(RemoteConnectionLost, match="announced a reply of 1073741824 bytes.*at most 4096"):
        server.request(protocol.CMD_PING, b"")
    os.close(pipe_w)
    assert not server.alive()
    _add_works()


def test_a_board_cache_others_can_write_is_refused(board, tmp_path):
    """Whoever can write the board's cache could plant code there: the connection is refused, saying why."""
    cache = tmp_path / "board" / "spine-remote"
    cache.mkdir(parents=True)
    os.chmod(cache, 0o777)
    x = torch.rand(10)
    with pytest.raises(RemoteConnectionLost, match="not the user's own or is writable by others"):
        add_kernel[(1,)](x, x, torch.empty(10), 10, BLOCK=16)
    os.chmod(cache, 0o700)
    _add_works()
