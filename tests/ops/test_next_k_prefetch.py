"""The x86 FMA matmul's prefetch of the next k tile (smt_microkernel._next_k_tiles): on AMD's cores,
the call that packs an A whose rows are a multiple of 4 KiB apart prefetches the tiles `acc += tl.dot(a, b)`
reads at the next step.
Chosen by the target (spine/microkernels.py's prefetch_next_k), and the products stay right where the
prefetched lines lie past the operands' ends."""
from __future__ import annotations

import glob
import os

import pytest
import torch
import triton

from spine.driver import CPUDriver
from tests.cpu_features import host_has
from tests.ops.test_dot import matmul_kernel


def _assembly(tmp_path, monkeypatch, cpu: str) -> str:
    """The assembly of the tutorial's fp32 matmul compiled (not run) for the host target as `cpu`."""
    monkeypatch.setenv("SPINE_TARGET", "host")
    monkeypatch.setenv("SPINE_HOST_CPU", cpu)
    monkeypatch.setenv("SPINE_TRITON_DUMP_PATH", str(tmp_path))
    triton.runtime.driver.set_active(CPUDriver(target="host"))
    a = torch.empty(64, 64)
    matmul_kernel.warmup(a, a, a, 64, 64, 64, 64, 1, 64, 1, 64, 1, BM=32, BN=32, BK=64, grid=(2, 2))
    path, = glob.glob(os.path.join(tmp_path, "*.s"))
    with open(path) as f:
        return f.read()


@pytest.mark.skipif(not host_has("sse2"), reason="the assembly is dumped by a host compile, for x86-64")
@pytest.mark.parametrize("cpu,prefetches", [("znver4", True), ("znver5", True), ("znver3", True), ("znver2", True),
                                            ("sapphirerapids", False), ("cascadelake", False), ("haswell", False),
                                            ("x86-64-v3", False), ("x86-64", False)])
def test_chosen_by_the_target(tmp_path, monkeypatch, cpu, prefetches):
    """AMD's cores prefetch, with AVX-512 or AVX2 (faster on a Zen 4 and a Zen 3); Intel's and the generic
    levels do not (slower on a Sapphire Rapids Xeon, not measured elsewhere)."""
    assert ("prefetcht0" in _assembly(tmp_path, monkeypatch, cpu)) == prefetches


@pytest.mark.parametrize("m,n,k,view", [(40, 48, 1024, False), (33, 70, 192, True), (64, 64, 1024, False)])
def test_products_where_a_is_packed(monkeypatch, m, n, k, view):
    """A's rows 1024 fp32 apart (the packed, prefetching call) over several k steps, edge rows and columns
    included; `view`: A and B views of wider matrices (the prefetched columns and rows are other data), at
    the end of their buffers (the last step's prefetches lie past them)."""
    monkeypatch.setenv("SPINE_TARGET", "host")
    triton.runtime.driver.set_active(CPUDriver(target="host"))
    if view:
        a, b = torch.randn(m, 1024)[:, 1024 - k:], torch.randn(k, 1024)[:, 1024 - n:]
    else:
        a, b = torch.randn(m, k), torch.randn(k, n)
    c = torch.empty(m, n)
    matmul_kernel[(triton.cdiv(m, 32), triton.cdiv(n, 32))](a, b, c, m, n, k, *a.stride(), *b.stride(), *c.stride(),
                                                            BM=32, BN=32, BK=64)
    torch.testing.assert_close(c, (a.double() @ b.double()).float(), rtol=1e-4, atol=1e-4)
