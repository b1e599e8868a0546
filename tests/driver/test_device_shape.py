"""The numbers GPU-style host code reads from a CPU (spine/device_shape.py): positive, and the usual
occupancy arithmetic gives whole programs per core."""
import pytest
import torch
import triton

from spine.device_shape import _size_bytes, device_properties, l2_bytes
from spine.targets import host_target, riscv64_target
from tests.kernels import softmax_kernel


@pytest.mark.parametrize("num_warps", [1, 2, 4, 8, 16, 32])
def test_the_tutorials_occupancy_arithmetic_gives_programs_on_every_core(target, num_warps):
    """Triton's fused-softmax tutorial sizes a persistent grid so: NUM_SM * occupancy programs."""
    driver = triton.runtime.driver.active
    properties = driver.utils.get_device_properties(0)
    a = torch.randn(64, 1000)
    compiled = softmax_kernel.warmup(a, a, a.stride(0), a.stride(0), 1000, BLOCK=1024, grid=(1,),
                                     num_warps=num_warps)
    compiled._init_handles()
    occupancy = properties["max_num_regs"] // (compiled.n_regs * properties["warpSize"] * num_warps)
    occupancy = min(occupancy, properties["max_shared_mem"] // compiled.metadata.shared)
    assert occupancy >= 1
    assert properties["multiprocessor_count"] >= 1
    assert compiled.metadata.shared == 1024 * 4      # the row tile
    assert compiled.metadata.shared <= properties["max_shared_mem"]


def test_a_tile_larger_than_the_cache_is_reported_at_the_caches_size(target):
    from tests.kernels import add_kernel
    n = 1 << 20
    x = torch.rand(n)
    compiled = add_kernel[(1,)](x, x, torch.empty(n), n, BLOCK=n)
    limit = triton.runtime.driver.active.utils.get_device_properties(0)["max_shared_mem"]
    assert compiled.metadata.shared == min(n * 4, limit)


def test_cache_sizes():
    assert _size_bytes("2048K") == 2 << 20 and _size_bytes("1M") == 1 << 20 and _size_bytes("512") == 512
    assert l2_bytes(riscv64_target()) == (512 << 10 if not riscv64_target().is_native else l2_bytes(riscv64_target()))
    assert l2_bytes(host_target()) >= 64 << 10
    assert device_properties(host_target(), 3)["multiprocessor_count"] == 3


def test_torch_cpu_answers_as_torch_cuda_does(target, monkeypatch):
    """What FlagGems reads through `torch.cpu` (its device module): properties as attributes, the same
    numbers as the driver's, and a capability."""
    import torch
    monkeypatch.setenv("SPINE_NUM_THREADS", "2")
    driver = triton.runtime.driver.active
    ours = driver.utils.get_device_properties(0)
    props = torch.cpu.get_device_properties(0)
    assert props.multi_processor_count == ours["multiprocessor_count"] == 2
    assert props.L2_cache_size == ours["max_shared_mem"]
    assert props.total_memory > 1 << 28 and (props.major, props.minor) == (0, 0)
    assert props.name == (driver.target.core or driver.target.cpu)
    assert torch.cpu.get_device_capability(0) == (0, 0)
    torch.cpu.set_stream(torch.cpu.current_stream())
