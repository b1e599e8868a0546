import pytest
import torch
import triton
import triton.language as tl


@triton.jit
def grid_ids_kernel(out_ptr):
    x = tl.program_id(0)
    y = tl.program_id(1)
    z = tl.program_id(2)
    nx = tl.num_programs(0)
    ny = tl.num_programs(1)
    linear = (z * ny + y) * nx + x
    tl.store(out_ptr + linear * 3 + 0, x)
    tl.store(out_ptr + linear * 3 + 1, y)
    tl.store(out_ptr + linear * 3 + 2, z)


@pytest.mark.parametrize("threads", ["1", "3"])
def test_three_dimensional_grid(target, monkeypatch, threads):
    monkeypatch.setenv("SPINE_NUM_THREADS", threads)
    gx, gy, gz = 5, 3, 2
    out = torch.full((gx * gy * gz * 3,), -1, dtype=torch.int32)
    grid_ids_kernel[(gx, gy, gz)](out)
    ids = out.view(gz, gy, gx, 3)
    zz, yy, xx = torch.meshgrid(torch.arange(gz), torch.arange(gy), torch.arange(gx), indexing="ij")
    assert torch.equal(ids[..., 0], xx.int())
    assert torch.equal(ids[..., 1], yy.int())
    assert torch.equal(ids[..., 2], zz.int())


def test_empty_grid_is_a_no_op(target):
    out = torch.full((3,), -1, dtype=torch.int32)
    grid_ids_kernel[(0,)](out)
    assert torch.all(out == -1)


def test_bad_thread_count(target, monkeypatch):
    monkeypatch.setenv("SPINE_NUM_THREADS", "0")
    out = torch.zeros(3, dtype=torch.int32)
    with pytest.raises(ValueError, match="SPINE_NUM_THREADS"):
        grid_ids_kernel[(1,)](out)


@pytest.mark.skipif(__import__("platform").machine() == "riscv64", reason="the arena exists only under QEMU")
def test_qemu_arena_grows_for_large_arguments(monkeypatch):
    from spine.driver import CPUDriver
    from spine.driver.cpu_driver import _executor_for
    from spine.targets import riscv64_target
    from tests.kernels import add_kernel
    triton.runtime.driver.set_active(CPUDriver(target="riscv64"))
    executor = _executor_for(riscv64_target())
    executor.shutdown()
    monkeypatch.setenv("SPINE_ARENA_MB", "1")
    small = torch.rand(1000)
    out = torch.empty(1000)
    add_kernel[(1,)](small, small, out, 1000, BLOCK=1024)
    assert executor.server.arena_bytes == 1 << 20
    n = 300_000  # three tensors of 1.2 MB
    x, y, res = torch.rand(n), torch.rand(n), torch.empty(n)
    add_kernel[(triton.cdiv(n, 4096),)](x, y, res, n, BLOCK=4096)
    torch.testing.assert_close(res, x + y)
    assert executor.server.arena_bytes >= 3 * n * 4
