"""int8 and bf16 tl.dot and smt.dot on Intel's AMX tiles (spine/microkernels.py's "amx", to_linalg/amx_matmul.py),
on the host: int8 exact against torch, bf16 within fp32 summation's bound, on sizes that are not multiples of
the 32 x 32 register block, the 16-row tiles or the 64-byte tile rows, with every way the product meets C
(alone, added to an accumulator, updated in place in a loop over k; C made of whole blocks, stored where it
is, or not). They run where the machine has AMX; the assembly tests compile for Sapphire Rapids anywhere."""
from __future__ import annotations

import glob
import re
import os

import pytest
import torch
import triton
import triton.language as tl

from spine.driver import CPUDriver
from spine.microkernels import choose
from spine.targets import cpu_features
from tests.cpu_features import host_has, host_runs_amx
from tests.ops.test_dot import matmul_kernel as float_matmul_kernel
from tests.ops.test_matrix_unit import dot_with_acc_kernel, matmul_kernel
from tests.smt.test_dot import run_dot

X86 = "x86_64-unknown-linux-gnu"
needs_amx = pytest.mark.skipif(not host_runs_amx(), reason="this machine's CPU has no AMX (amx_tile, amx_int8, "
                               "amx_bf16), or Linux does not give this process its tile state")


@pytest.fixture
def host(monkeypatch):
    monkeypatch.setenv("SPINE_TARGET", "host")
    triton.runtime.driver.set_active(CPUDriver(target="host"))


def _int8(*shape):
    return torch.randint(-128, 128, shape, dtype=torch.int8)


def _matmul(a, b, block=(32, 32, 64), out=torch.int32):
    (m, k), n = a.shape, b.shape[1]
    c = torch.empty(m, n, dtype=out)
    bm, bn, bk = block
    kernel = matmul_kernel if out == torch.int32 else float_matmul_kernel
    kernel[(triton.cdiv(m, bm), triton.cdiv(n, bn))](a, b, c, m, n, k, *a.stride(), *b.stride(), *c.stride(),
                                                     BM=bm, BN=bn, BK=bk)
    return c


def assert_bf16_product(c, a, b):
    """c is a @ b of bf16 inputs to within fp32 summation in any order (each product is exact in fp32)."""
    ref = a.double() @ b.double()
    bound = a.shape[1] * 2.0 ** -23 * (a.double().abs() @ b.double().abs())
    excess = ((c.double() - ref).abs() - bound).max().item()
    assert excess <= 0, f"off by more than fp32 summation allows (by {excess:g})"


@needs_amx
@pytest.mark.parametrize("m,n,k,block", [(37, 45, 70, (32, 32, 64)), (64, 64, 128, (64, 64, 64)),
                                         (17, 100, 9, (32, 32, 64)), (100, 70, 300, (64, 64, 128)),
                                         (33, 47, 65, (16, 16, 16)), (128, 96, 256, (128, 32, 128))])
def test_int8_tiled_matmul(host, m, n, k, block):
    """The tutorial's loop over k, the accumulator updated in place: ragged edges (a padded copy of C) and
    whole blocks (C's tiles loaded and stored where it is)."""
    a, b = _int8(m, k), _int8(k, n)
    torch.testing.assert_close(_matmul(a, b, block), a.int() @ b.int(), rtol=0, atol=0)


@needs_amx
@pytest.mark.parametrize("m,n,k,block", [(37, 45, 70, (32, 32, 32)), (64, 64, 128, (64, 64, 64)),
                                         (50, 33, 100, (64, 64, 64))])
def test_bf16_tiled_matmul(host, m, n, k, block):
    a, b = torch.randn(m, k).bfloat16(), torch.randn(k, n).bfloat16()
    assert_bf16_product(_matmul(a, b, block, out=torch.float32), a, b)


@needs_amx
@pytest.mark.parametrize("dtype", [torch.int8, torch.bfloat16])
def test_b_read_across_its_rows(host, dtype):
    """x @ W^T: B's columns are not next to each other, so it is copied before packing."""
    if dtype == torch.int8:
        a, w = _int8(40, 72), _int8(24, 72)
        torch.testing.assert_close(_matmul(a, w.t(), (32, 16, 32)), a.int() @ w.t().int(), rtol=0, atol=0)
    else:
        a, w = torch.randn(40, 72).bfloat16(), torch.randn(24, 72).bfloat16()
        assert_bf16_product(_matmul(a, w.t(), (32, 16, 32), out=torch.float32), a, w.t())


@needs_amx
def test_extreme_values_sum_exactly(host):
    a = torch.full((32, 256), -128, dtype=torch.int8)
    b = torch.full((256, 32), -128, dtype=torch.int8)
    assert _matmul(a, b, block=(32, 32, 256)).eq(4_194_304).all()


@needs_amx
@pytest.mark.parametrize("bm,bn,bk", [(32, 16, 64), (64, 32, 64)])
def test_product_added_to_an_accumulator(host, bm, bn, bk):
    """tl.dot(a, b, acc) with acc read from memory: added in the write-back (16 columns) or loaded into the
    tiles (whole blocks)."""
    a, b = _int8(bm, bk), _int8(bk, bn)
    acc = torch.randint(-2**20, 2**20, (bm, bn), dtype=torch.int32)
    c = torch.empty(bm, bn, dtype=torch.int32)
    dot_with_acc_kernel[(1,)](a, b, acc, c, BM=bm, BN=bn, BK=bk)
    torch.testing.assert_close(c, acc + a.int() @ b.int(), rtol=0, atol=0)


@needs_amx
@pytest.mark.parametrize("micro", [(16, 8, 16), (8, 32, 8)])
def test_smt_dot(host, micro):
    a, b = _int8(32, 64), _int8(64, 32)
    torch.testing.assert_close(run_dot(a, b, micro, out_dtype=tl.int32, out_torch=torch.int32), a.int() @ b.int(),
                               rtol=0, atol=0)
    x, y = torch.randn(32, 64).bfloat16(), torch.randn(64, 32).bfloat16()
    c = run_dot(x, y, micro, out_dtype=tl.float32, out_torch=torch.float32)
    assert_bf16_product(c, x, y)


def _assembly(tmp_path, monkeypatch, dtype=torch.int8, **env) -> str:
    """The assembly of the tiled matmul compiled (not run) for the host target with `env`."""
    monkeypatch.setenv("SPINE_TARGET", "host")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("SPINE_TRITON_DUMP_PATH", str(tmp_path))
    triton.runtime.driver.set_active(CPUDriver(target="host"))
    kernel = matmul_kernel if dtype == torch.int8 else float_matmul_kernel
    a = torch.empty(64, 64, dtype=dtype)
    c = torch.empty(64, 64, dtype=torch.int32 if dtype == torch.int8 else torch.float32)
    kernel.warmup(a, a, c, 64, 64, 64, 64, 1, 64, 1, 64, 1, BM=32, BN=32, BK=64, grid=(2, 2))
    path, = glob.glob(os.path.join(tmp_path, "*.s"))
    with open(path) as f:
        return f.read()


@pytest.mark.skipif(not host_has("avx512f"), reason="the assembly is dumped by a host compile, for x86-64")
@pytest.mark.parametrize("dtype,instruction", [(torch.int8, "tdpbssd"), (torch.bfloat16, "tdpbf16ps")])
def test_the_code_runs_on_amx_tiles(tmp_path, monkeypatch, dtype, instruction):
    assembly = _assembly(tmp_path, monkeypatch, dtype, SPINE_HOST_CPU="sapphirerapids")
    assert assembly.count(instruction) >= 4 and "ldtilecfg" in assembly and "tileloadd" in assembly


@pytest.mark.skipif(not host_has("avx512f"), reason="the assembly is dumped by a host compile, for x86-64")
@pytest.mark.parametrize("env", [{"SPINE_HOST_CPU": "sapphirerapids", "SPINE_MATRIX_UNIT": "0"},
                                 {"SPINE_HOST_CPU": "znver4"}, {"SPINE_HOST_CPU": "icelake-server"}])
def test_no_tiles_when_switched_off_or_absent(tmp_path, monkeypatch, env):
    assembly = _assembly(tmp_path, monkeypatch, **env)
    assert "tdpbssd" not in assembly and "ldtilecfg" not in assembly


def test_the_kernel_is_chosen_by_the_target_cpu():
    """AMX from the CPU's name or from a feature string, never from the machine that compiles."""
    assert {"+amx-tile", "+amx-int8", "+amx-bf16"} <= cpu_features(X86, "sapphirerapids", "")
    assert choose(X86, "sapphirerapids", "").name == "avx512-amx"
    assert choose(X86, "sapphirerapids", "", matrix_unit=False).name == "avx512"
    assert choose(X86, "sapphirerapids", "-amx-tile").name == "avx512-vnni"
    assert choose(X86, "znver4", "").name == "avx512-vnni-bf16"
    assert choose(X86, "rocketlake", "+avx512f,+amx-tile,+amx-int8,+amx-bf16").name == "avx512-amx"


@pytest.mark.parametrize("dtype", [torch.int8, torch.bfloat16])
def test_b_is_packed_once_per_launch_on_each_thread(tmp_path, monkeypatch, dtype):
    """B is a kernel argument nothing writes: its panels come from the runtime's per-thread panels
    (cpp/shared_panels.h), packed by the first program of a column on each thread (compiled here, run
    below where the machine has AMX)."""
    assembly = _assembly(tmp_path, monkeypatch, dtype, SPINE_HOST_CPU="sapphirerapids")
    assert re.search(r"\bcallq?\s+\*?spine_shared_panel", assembly), "no call of spine_shared_panel"


@needs_amx
@pytest.mark.parametrize("dtype", [torch.int8, torch.bfloat16])
def test_a_kept_panel_is_packed_again_in_the_next_launch(host, dtype):
    """Programs of one column share B's panel within a launch; a second launch with B changed in place
    (same address, same strides) gets its new values, on one thread and on several."""
    m, n, k = 160, 96, 128
    make = _int8 if dtype == torch.int8 else (lambda *s: torch.randn(*s).bfloat16())
    a, b = make(m, k), make(k, n)
    for threads in (1, 4):
        for _ in range(2):
            c = torch.empty(m, n, dtype=torch.int32 if dtype == torch.int8 else torch.float32)
            kernel = matmul_kernel if dtype == torch.int8 else float_matmul_kernel
            kernel[(m // 32, n // 32)](a, b, c, m, n, k, *a.stride(), *b.stride(), *c.stride(), BM=32, BN=32, BK=64,
                                       num_threads=threads)
            if dtype == torch.int8:
                torch.testing.assert_close(c, a.int() @ b.int(), rtol=0, atol=0)
            else:
                assert_bf16_product(c, a, b)
            b.copy_(make(k, n))
