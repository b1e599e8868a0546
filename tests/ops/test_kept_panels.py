"""B's packed panels kept for the rest of a launch by each thread (compiler/shared_panels.py,
to_linalg/kept_panels.py, cpp/shared_panels.h) in the FMA matmul: the tutorial's loop over k
with several row blocks per column of C, ragged edges (where the edge tile's zero-padded copy is packed by
every call), B changed in place between launches, on one thread and on two, on the host and on riscv64
(RVV, whose panels follow the vector length); the code asks for kept panels where B is a plain matrix."""
from __future__ import annotations

import glob
import os

import pytest
import torch
import triton

from spine.driver import CPUDriver
from spine.microkernels import MICROKERNELS
from spine.to_linalg.smt_microkernel import PackedMatmul, shares_b
from spine.to_linalg.smt_panels import Operand
from tests.ops.test_dot import matmul_kernel


@pytest.fixture(params=["host", "riscv64"])
def either(request, monkeypatch):
    monkeypatch.setenv("SPINE_TARGET", request.param)
    triton.runtime.driver.set_active(CPUDriver(target=request.param))


def _launch(a, b, c, block, threads):
    (m, k), n = a.shape, b.shape[1]
    bm, bn, bk = block
    matmul_kernel[(triton.cdiv(m, bm), triton.cdiv(n, bn))](a, b, c, m, n, k, *a.stride(), *b.stride(), *c.stride(),
                                                            BM=bm, BN=bn, BK=bk, num_threads=threads)


@pytest.mark.parametrize("m,n,k,block", [(256, 96, 160, (32, 32, 32)), (100, 70, 90, (32, 32, 16)),
                                         (192, 64, 64, (64, 64, 64))])
@pytest.mark.parametrize("threads", [1, 2])
def test_b_changed_between_launches_is_packed_again(either, m, n, k, block, threads):
    a, b = torch.randn(m, k), torch.randn(k, n)
    for _ in range(3):
        c = torch.empty(m, n)
        _launch(a, b, c, block, threads)
        torch.testing.assert_close(c, a @ b, rtol=1e-4, atol=1e-4)
        b.copy_(torch.randn(k, n))


def test_views_of_one_matrix_at_other_offsets_are_other_sources(either):
    """A view of B at another offset (B's second half) is another source: its own panels."""
    a, whole = torch.randn(64, 32), torch.randn(64, 64)
    b = whole[32:]
    c = torch.empty(64, 64)
    _launch(a, b, c, (32, 32, 32), 1)
    torch.testing.assert_close(c, a @ b, rtol=1e-4, atol=1e-4)
    b = whole[:32]
    _launch(a, b, c, (32, 32, 32), 1)
    torch.testing.assert_close(c, a @ b, rtol=1e-4, atol=1e-4)


def test_the_code_asks_for_kept_panels(either, tmp_path, monkeypatch):
    monkeypatch.setenv("SPINE_TRITON_DUMP_PATH", str(tmp_path))
    a = torch.empty(256, 256)
    matmul_kernel.warmup(a, a, a, 256, 256, 256, 256, 1, 256, 1, 256, 1, BM=64, BN=64, BK=32, grid=(4, 4))
    path, = glob.glob(os.path.join(tmp_path, "*.s"))
    with open(path) as f:
        assert "spine_shared_panel" in f.read()


def test_which_kernels_keep_panels():
    """The FMA kernels, fixed-width or scalable, keep a plain B's panels; B packed before a loop
    (b_panels) is packed once already, and the matrix units' own emitters say for themselves (SHARES_B)."""
    plain = Operand((32, 32), "f32")
    for name in ("avx2", "avx512", "rvv"):
        assert shares_b(PackedMatmul(plain, plain, plain, None, "f32", MICROKERNELS[name]))
    assert not shares_b(PackedMatmul(plain, plain, plain, None, "f32", MICROKERNELS["avx2"], b_panels=True))
    assert not shares_b(PackedMatmul(plain, plain, plain, None, "f32", MICROKERNELS["rvv"], b_panels=True))
    int8 = Operand((32, 32), "i8")
    assert not shares_b(PackedMatmul(int8, int8, Operand((32, 32), "i32"), None, "i32", MICROKERNELS["ime"]))
