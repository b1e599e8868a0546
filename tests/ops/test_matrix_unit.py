"""int8 tl.dot and smt.dot on K1's matrix unit (`SPINE_RISCV_CPU=spacemit-x60`: spine/microkernels.py's "ime",
to_linalg/ime_matmul.py), under QEMU, where the kernel server emulates `smt.vmadot`
(cpp/matrix_emulation.c): exact against torch, on sizes that are not multiples of the 8 x 16 register block
or of the 8-step tiles, with every way the product meets C (alone, added to an accumulator, updated in
place in a loop over k, packed smt tiles)."""
from __future__ import annotations

import glob
import os

import pytest
import torch
import triton
import triton.language as tl

from spine.driver import CPUDriver
from tests.smt.test_dot import accumulate_kernel, run_dot


def on_core(monkeypatch, cpu: str) -> None:
    """Kernels from here on compile for riscv64 on `cpu` (a SpacemiT core) and run under QEMU."""
    monkeypatch.setenv("SPINE_TARGET", "riscv64")
    monkeypatch.setenv("SPINE_RISCV_CPU", cpu)
    triton.runtime.driver.set_active(CPUDriver(target="riscv64"))


@pytest.fixture
def x60(monkeypatch):
    on_core(monkeypatch, "spacemit-x60")


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, ACC: tl.constexpr = tl.int32):
    """The tutorial's matmul, int8 to int32 (or with an ACC accumulator: fp16 to fp32): the accumulator
    carried over k is updated in place."""
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=ACC)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * sam + (k + rk)[None, :] * sak,
                    mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0)
        b = tl.load(b_ptr + (k + rk)[:, None] * sbk + rn[None, :] * sbn,
                    mask=((k + rk)[:, None] < K) & (rn[None, :] < N), other=0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def _matmul(a, b, block=(32, 32, 64)):
    (m, k), n = a.shape, b.shape[1]
    c = torch.empty(m, n, dtype=torch.int32)
    bm, bn, bk = block
    matmul_kernel[(triton.cdiv(m, bm), triton.cdiv(n, bn))](a, b, c, m, n, k, *a.stride(), *b.stride(),
                                                            *c.stride(), BM=bm, BN=bn, BK=bk)
    return c


def _int8(*shape):
    return torch.randint(-128, 128, shape, dtype=torch.int8)


@pytest.mark.parametrize("m,n,k", [(37, 45, 70), (64, 64, 128), (17, 100, 9)])
def test_tiled_matmul_with_ragged_edges(x60, m, n, k):
    a, b = _int8(m, k), _int8(k, n)
    torch.testing.assert_close(_matmul(a, b), a.int() @ b.int(), rtol=0, atol=0)


def test_b_read_across_its_rows(x60):
    """x @ W^T: B is a transposed view, copied into a row-major buffer before packing."""
    a, w = _int8(40, 72), _int8(24, 72)
    torch.testing.assert_close(_matmul(a, w.t(), block=(32, 16, 32)), a.int() @ w.t().int(), rtol=0, atol=0)


def test_extreme_values_sum_exactly(x60):
    """-128 * -128 summed over k = 256: 4,194,304 in every element, far past int16."""
    a = torch.full((16, 256), -128, dtype=torch.int8)
    b = torch.full((256, 16), -128, dtype=torch.int8)
    assert _matmul(a, b, block=(16, 16, 256)).eq(4_194_304).all()


@triton.jit
def dot_with_acc_kernel(a_ptr, b_ptr, acc_ptr, c_ptr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """tl.dot(a, b, acc) with an accumulator read from memory (added to the product, not updated in place)."""
    rm, rn, rk = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
    a = tl.load(a_ptr + rm[:, None] * BK + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * BN + rn[None, :])
    acc = tl.load(acc_ptr + rm[:, None] * BN + rn[None, :])
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], tl.dot(a, b, acc, out_dtype=tl.int32))


def test_product_added_to_an_accumulator(x60):
    a, b = _int8(32, 64), _int8(64, 16)
    acc = torch.randint(-2**20, 2**20, (32, 16), dtype=torch.int32)
    c = torch.empty(32, 16, dtype=torch.int32)
    dot_with_acc_kernel[(1,)](a, b, acc, c, BM=32, BN=16, BK=64)
    torch.testing.assert_close(c, acc + a.int() @ b.int(), rtol=0, atol=0)


@pytest.mark.parametrize("micro", [(16, 8, 16), (8, 32, 8)])
def test_smt_dot(x60, micro):
    a, b = _int8(32, 64), _int8(64, 32)
    torch.testing.assert_close(run_dot(a, b, micro, out_dtype=tl.int32, out_torch=torch.int32), a.int() @ b.int(),
                               rtol=0, atol=0)


@pytest.mark.parametrize("fused", [True, False])
def test_smt_dot_into_a_packed_accumulator(x60, fused):
    a, b = _int8(32, 96), _int8(96, 32)
    c = torch.empty(32, 32, dtype=torch.int32)
    accumulate_kernel[(1,)](a, b, c, M=32, N=32, K=96, KS=32, MM=16, MK=8, MN=16, FUSED=fused, ACC_TYPE=tl.int32)
    torch.testing.assert_close(c, a.int() @ b.int(), rtol=0, atol=0)


def _assembly(tmp_path, monkeypatch, **env) -> str:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("SPINE_TRITON_DUMP_PATH", str(tmp_path))
    a, b = _int8(32, 64), _int8(64, 32)
    torch.testing.assert_close(_matmul(a, b), a.int() @ b.int(), rtol=0, atol=0)
    path, = glob.glob(os.path.join(tmp_path, "matmul_kernel*.s"))
    with open(path) as f:
        return f.read()


def test_the_code_runs_on_smt_vmadot(x60, tmp_path, monkeypatch):
    assembly = _assembly(tmp_path, monkeypatch)
    assert assembly.count("smt.vmadot") >= 8


@pytest.mark.parametrize("env", [{"SPINE_MATRIX_UNIT": "0"}, {"SPINE_RISCV_CPU": "generic-rv64"}])
def test_no_matrix_instructions_when_switched_off_or_absent(x60, tmp_path, monkeypatch, env):
    assembly = _assembly(tmp_path, monkeypatch, **env)
    assert "smt.vmadot" not in assembly and "vmacc" in assembly
