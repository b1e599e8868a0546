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
