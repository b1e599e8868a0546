"""The runtimes' settings come from spine/switches.py, through the launch (spine/driver/settings.py): the
host fast path reads them again only when the environment changed, smt.parallel teams are sized by the
threads the launch was given, and the kernel server takes its table size on its command line."""
import os
import subprocess

import pytest
import torch
import triton

from spine.driver import CPUDriver, native, settings
from spine.driver.arguments import Arguments
from spine.driver.launcher import CPULauncher, launch_extension
from spine.driver.qemu import GUEST_SYSROOT, qemu_binary
from spine.driver.remote import RemoteServer
from spine import switches
from tests.driver.test_kernel_server import BoardGuest, board_command, needs_qemu, poke_so, put_message
from spine.driver import kernel_protocol as protocol
from tests.kernels import add_kernel
from tests.smt.test_parallel import all_in_flight_kernel

CORES = os.cpu_count() or 1


def _use(target: str, monkeypatch) -> None:
    monkeypatch.setenv("SPINE_TARGET", target)
    triton.runtime.driver.set_active(CPUDriver(target=target))


def _compiled_add():
    x, y, out = torch.rand(4), torch.rand(4), torch.empty(4)
    compiled = add_kernel[(1,)](x, y, out, 4, BLOCK=16)
    return compiled, (x, y, out)


def test_the_fast_path_reads_the_settings_only_when_the_environment_changed(monkeypatch):
    """Reading them is a Python call, dearer than the rest of a launch: once, then again after a change."""
    _use("host", monkeypatch)
    extension = launch_extension()
    if extension is None:
        pytest.skip("no launch fast path on this machine")
    compiled, (x, y, out) = _compiled_add()
    launcher = CPULauncher(compiled.src, compiled.metadata)
    runtime = compiled.function.runtime
    reads = []

    def counted():
        reads.append(settings.runtime_settings())
        return reads[-1]
    direct = extension.DirectLauncher(launcher.direct_params(), [], torch.Tensor, [], [],
                                      runtime.address("spine_host_run_grid"), runtime.address("spine_assert_pending"),
                                      counted, launcher, launcher.finish)

    def launch(n=4):
        out.zero_()
        direct(1, 1, 1, None, compiled.function, None, None, None, None, x, y, out, n)
        torch.testing.assert_close(out, x + y)
    monkeypatch.delenv("SPINE_NUM_THREADS", raising=False)
    for _ in range(20):
        launch()
    assert len(reads) == 1 and reads[0].threads == CORES
    monkeypatch.setenv("SPINE_NUM_THREADS", "3")
    launch()
    launch()
    assert len(reads) == 2 and reads[1].threads == 3
    monkeypatch.setenv("SPINE_NUM_THREADS", "none")
    with pytest.raises(ValueError, match="SPINE_NUM_THREADS='none'"):
        launch()
    with pytest.raises(ValueError, match="SPINE_NUM_THREADS='none'"):   # not kept: read again, refused again
        launch()
    monkeypatch.setenv("SPINE_NUM_THREADS", "2")
    launch()
    assert reads[-1].threads == 2


def test_host_settings_follow_the_switches(monkeypatch):
    monkeypatch.delenv("SPINE_KERNEL_TIMEOUT", raising=False)
    monkeypatch.delenv("PROTON_KERNEL_CAPTURE", raising=False)
    monkeypatch.setenv("SPINE_NUM_THREADS", "5")
    assert settings.runtime_settings() == (5, False, 0)   # no timeout on the host unless one is set
    assert settings.guest_kernel_timeout() == 600.0
    monkeypatch.setenv("PROTON_KERNEL_CAPTURE", "0")      # the switch's "off", which the C++ once read as on
    assert not settings.runtime_settings().capture
    for raw, ns in (("2.5", 2_500_000_000), (" 2.5 ", 2_500_000_000), ("1e-12", 1), ("inf", 0), ("0", 0),
                    ("9.9e9", 4 * 10**18)):
        monkeypatch.setenv("SPINE_KERNEL_TIMEOUT", raw)
        assert settings.host_kernel_timeout_ns() == ns, raw
    for bad in ("1_0", "nan", "-1"):   # refused alike on every target
        monkeypatch.setenv("SPINE_KERNEL_TIMEOUT", bad)
        for read in (settings.host_kernel_timeout_ns, settings.guest_kernel_timeout):
            with pytest.raises(ValueError, match="SPINE_KERNEL_TIMEOUT"):
                read()
    monkeypatch.delenv("SPINE_KERNEL_TIMEOUT")
    monkeypatch.setenv("SPINE_NUM_THREADS", str(2**40))   # a count C takes as an int32
    assert settings.default_num_threads() == 2**31 - 1
    monkeypatch.setenv("SPINE_SERVER_KERNEL_SLOTS", "100000")
    assert settings.kernel_server_options() == ("--kernel-slots", "4096")


def test_a_parallel_loops_team_follows_the_launchs_threads(monkeypatch):
    """The team is sized by the threads the launch was given, not by the environment: the runtime once
    read SPINE_NUM_THREADS itself and, with it unset, gave a launch on CORES + 1 threads a team of CORES."""
    _use("host", monkeypatch)
    monkeypatch.delenv("SPINE_NUM_THREADS", raising=False)
    out = torch.zeros(16, dtype=torch.int32)
    compiled = all_in_flight_kernel[(1,)](out)
    assert out[15].item() == min(CORES, 15)
    launcher = CPULauncher(compiled.src, compiled.metadata)
    wanted = min(CORES + 1, 15)
    monkeypatch.setattr(native, "default_num_threads", lambda requested=0: wanted)
    out.zero_()
    compiled.function.launch((1, 1, 1), Arguments(launcher.all_params, (out,), launcher.written))
    assert out[15].item() == wanted
    assert out[:wanted].tolist() == list(range(1, wanted + 1))


@needs_qemu
@pytest.mark.parametrize("threads", ["1", "3"])
def test_a_parallel_loops_team_under_qemu_follows_spine_num_threads(monkeypatch, threads):
    _use("riscv64", monkeypatch)
    monkeypatch.setenv("SPINE_NUM_THREADS", threads)
    out = torch.zeros(16, dtype=torch.int32)
    all_in_flight_kernel[(1,)](out)
    assert out[15].item() == int(threads)
    assert out[:int(threads)].tolist() == list(range(1, int(threads) + 1))


class _BoardWithoutTheVariable(BoardGuest):
    """A board whose shell lacks this process's environment, as one reached by ssh does."""

    def __post_init__(self):
        command, runner = board_command(self.board_dir)
        self.server = RemoteServer(f"env -u SPINE_SERVER_KERNEL_SLOTS {command}", runner)


@needs_qemu
def test_the_kernel_table_size_reaches_a_board_without_the_variable(tmp_path, monkeypatch):
    """The server read SPINE_SERVER_KERNEL_SLOTS from its own environment, which a board does not share:
    there the table kept its 4096 slots."""
    monkeypatch.setenv("SPINE_SERVER_KERNEL_SLOTS", "1")
    guest = _BoardWithoutTheVariable(str(tmp_path))
    try:
        guest.arena_write(0, bytes(16))
        guest.load("a.so", poke_so())
        assert guest.exchange(put_message("b.so", poke_so())) == (0, b"")
        status, body = guest.exchange(protocol.frame(protocol.CMD_LOAD, b"./b.so"))
        assert status == protocol.STATUS_TABLE_FULL, body
    finally:
        guest.close()


@needs_qemu
@pytest.mark.parametrize("slots", ["0", "4097", "many", ""])
def test_the_kernel_server_refuses_a_bad_table_size(slots):
    from spine.driver.toolchain import guest_kernel_server
    proc = subprocess.run([qemu_binary(), "-L", GUEST_SYSROOT, "-cpu", switches.QEMU_CPU.get(), guest_kernel_server(),
                           "--kernel-slots", slots, "--stream", "."], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 2 and "--kernel-slots 1..4096" in proc.stderr
