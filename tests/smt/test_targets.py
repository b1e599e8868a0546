"""The smt matmul on every kind of target its micro-kernels are chosen for: RVV at VLEN 128 and 512 (one
vector-length-agnostic binary), riscv64 without V, x86 levels without AVX-512, and compiled for the
RISC-V CPUs users have."""
import pytest
import torch
import triton

from spine.driver import CPUDriver
from tests.cpu_features import host_runs
from tests.smt.test_smt_mm import check, smt_mm

QEMU_VLEN = "rv64,v=true,vlen={},elen=64,vext_spec=v1.0,zfh=true,zvfh=true,zba=true,zbb=true,zbs=true"
RISCV_NO_V = "+64bit,+m,+a,+f,+d,+c"


def _restart_qemu():
    from spine.driver.cpu_driver import _executor_for
    from spine.targets import riscv64_target
    _executor_for(riscv64_target()).shutdown()


def _run(split="split_k", dtype=torch.float32):
    a = torch.randn(45, 50).to(dtype)
    b = torch.randn(50, 70).to(dtype)
    check(smt_mm(a, b, split), a, b)


@pytest.mark.parametrize("vlen", [128, 512])
def test_other_vector_lengths(vlen, monkeypatch):
    monkeypatch.setenv("SPINE_QEMU_CPU", QEMU_VLEN.format(vlen))
    _restart_qemu()
    try:
        triton.runtime.driver.set_active(CPUDriver(target="riscv64"))
        _run("split_k")
        _run("split_m", torch.float16)
    finally:
        _restart_qemu()


def test_without_the_vector_extension(monkeypatch, fresh_cache):
    monkeypatch.setenv("SPINE_RISCV_FEATURES", RISCV_NO_V)
    triton.runtime.driver.set_active(CPUDriver(target="riscv64"))
    _run("split_mn")


@pytest.mark.parametrize("level", ["x86-64-v2", "x86-64-v3"])
def test_x86_levels(level, monkeypatch, fresh_cache):
    if not host_runs(level):
        pytest.skip(f"this machine cannot run {level} code")
    monkeypatch.setenv("SPINE_HOST_CPU", level)
    triton.runtime.driver.set_active(CPUDriver(target="host"))
    _run("split_k")
    _run("split_m", torch.float16)


@pytest.mark.parametrize("cpu", ["spacemit-x60", "sifive-x280"])
def test_compiles_for_riscv_cpus(cpu, monkeypatch, fresh_cache):
    """Compiled only (QEMU 7.2 lacks some of these CPUs' extensions), with the RVV micro-kernel."""
    monkeypatch.setenv("SPINE_RISCV_CPU", cpu)
    triton.runtime.driver.set_active(CPUDriver(target="riscv64"))
    from tests.smt.test_smt_mm import mm_kernel
    a, b, c = torch.randn(32, 32), torch.randn(32, 32), torch.empty(32, 32)
    compiled = mm_kernel.warmup(a, b, c, 32, 32, 32, 32, 1, 32, 1, 32, 1, grid=(1, 1), BLOCK_SIZE_M=32,
                                BLOCK_SIZE_N=32, BLOCK_SIZE_K=32, SPLIT_M=0, SPLIT_MN=0, SPLIT_K=1, SUB_BLK_M=16,
                                SUB_BLK_N=32, SUB_BLK_K=32, MICRO_M=8, MICRO_K=8, MICRO_N=16)
    assert compiled.asm["so"][:4] == b"\x7fELF"
    assert "vscale" in compiled.asm["llir"]
