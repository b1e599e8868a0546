"""int8 and bf16 tl.dot and smt.dot on AVX-512's dot products (spine/microkernels.py's "vnni",
to_linalg/vnni_matmul.py), the kernel x86 CPUs without AMX get: int8 on `vpdpbusd` (compiled for Cascade Lake),
bf16 on `vdpbf16ps` (compiled for Zen 4, which takes it). int8 exact against torch (the unsigned B and its
correction included), bf16 within fp32 summation's bound, on sizes that are not multiples of the 8 x 32
register block or of the 4 (int8) and 2 (bf16) k of a dot product. They run where the machine has the
instructions; the assembly tests compile anywhere on x86-64. AVX-VNNI's 256-bit form (compiled for Alder
Lake) is tested the same way."""
from __future__ import annotations

import glob
import os
import re

import pytest
import torch
import triton
import triton.language as tl

from spine.driver import CPUDriver
from spine.microkernels import choose
from tests.cpu_features import host_has
from tests.ops.test_amx import X86, _assembly, _int8, _matmul, assert_bf16_product
from tests.ops.test_matrix_unit import dot_with_acc_kernel, matmul_kernel
from tests.smt.test_dot import run_dot

# Cascade Lake: the first CPU with AVX512-VNNI, whose code every later one runs. Zen 4 without SSE4a (AMD's
# own, which Intel's cores lack), for machines with Zen 4's AVX-512 extensions.
CASCADE_LAKE = {"SPINE_HOST_CPU": "cascadelake"}
ZEN4 = {"SPINE_HOST_CPU": "znver4", "SPINE_HOST_FEATURES": "-sse4a"}
ALDER_LAKE = {"SPINE_HOST_CPU": "alderlake"}     # AVX2 and AVX-VNNI, no AVX-512
needs_vnni = pytest.mark.skipif(not host_has("avx512_vnni", "avx512bw", "avx512vl", "avx512dq"),
                                reason="this machine's CPU has no AVX512-VNNI")
needs_avx_vnni = pytest.mark.skipif(not host_has("avx_vnni", "avx2", "fma", "bmi2", "f16c", "movbe", "gfni", "vaes",
                                                 "vpclmulqdq"),
                                    reason="this machine's CPU lacks Alder Lake's extensions (AVX-VNNI among them)")
needs_bf16 = pytest.mark.skipif(not host_has("avx512_vnni", "avx512_bf16", "avx512bw", "avx512vbmi", "avx512_vbmi2",
                                             "avx512ifma", "avx512_bitalg", "avx512_vpopcntdq", "gfni", "vaes"),
                                reason="this machine's CPU lacks Zen 4's AVX-512 extensions (AVX512-BF16 among them)")


def _on(monkeypatch, env: dict) -> None:
    monkeypatch.setenv("SPINE_TARGET", "host")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    triton.runtime.driver.set_active(CPUDriver(target="host"))


@needs_vnni
@pytest.mark.parametrize("m,n,k,block", [(37, 45, 70, (32, 32, 64)), (64, 64, 128, (64, 64, 64)),
                                         (17, 100, 9, (32, 32, 64)), (33, 47, 65, (16, 16, 16)),
                                         (128, 96, 256, (128, 32, 128))])
def test_int8_tiled_matmul(monkeypatch, m, n, k, block):
    _on(monkeypatch, CASCADE_LAKE)
    a, b = _int8(m, k), _int8(k, n)
    torch.testing.assert_close(_matmul(a, b, block), a.int() @ b.int(), rtol=0, atol=0)


@needs_vnni
def test_int8_extremes_and_the_unsigned_correction(monkeypatch):
    """-128 and 127 everywhere: B + 128 spans 0 .. 255 and the correction 128 * row sums is at its largest."""
    _on(monkeypatch, CASCADE_LAKE)
    a = torch.full((40, 300), -128, dtype=torch.int8)
    a[::2] = 127
    b = torch.full((300, 40), 127, dtype=torch.int8)
    b[:, ::3] = -128
    torch.testing.assert_close(_matmul(a, b, (32, 32, 64)), a.int() @ b.int(), rtol=0, atol=0)


@needs_vnni
@pytest.mark.parametrize("bm,bn,bk", [(32, 16, 64), (64, 32, 64)])
def test_product_added_to_an_accumulator(monkeypatch, bm, bn, bk):
    _on(monkeypatch, CASCADE_LAKE)
    a, b = _int8(bm, bk), _int8(bk, bn)
    acc = torch.randint(-2**20, 2**20, (bm, bn), dtype=torch.int32)
    c = torch.empty(bm, bn, dtype=torch.int32)
    dot_with_acc_kernel[(1,)](a, b, acc, c, BM=bm, BN=bn, BK=bk)
    torch.testing.assert_close(c, acc + a.int() @ b.int(), rtol=0, atol=0)


@needs_vnni
def test_b_read_across_its_rows(monkeypatch):
    _on(monkeypatch, CASCADE_LAKE)
    a, w = _int8(40, 72), _int8(24, 72)
    torch.testing.assert_close(_matmul(a, w.t(), (32, 16, 32)), a.int() @ w.t().int(), rtol=0, atol=0)


@needs_avx_vnni
@pytest.mark.parametrize("m,n,k,block", [(37, 45, 70, (32, 32, 64)), (17, 100, 9, (32, 32, 64)),
                                         (64, 96, 256, (64, 32, 128))])
def test_int8_on_avx_vnni(monkeypatch, m, n, k, block):
    """The 256-bit form (6 x 2 ymm register blocks) for CPUs with AVX-VNNI and no AVX-512."""
    _on(monkeypatch, ALDER_LAKE)
    a, b = _int8(m, k), _int8(k, n)
    torch.testing.assert_close(_matmul(a, b, block), a.int() @ b.int(), rtol=0, atol=0)


@needs_bf16
@pytest.mark.parametrize("m,n,k,block", [(37, 45, 70, (32, 32, 32)), (64, 64, 128, (64, 64, 64)),
                                         (50, 33, 101, (64, 64, 64))])
def test_bf16_tiled_matmul(monkeypatch, m, n, k, block):
    _on(monkeypatch, ZEN4)
    a, b = torch.randn(m, k).bfloat16(), torch.randn(k, n).bfloat16()
    assert_bf16_product(_matmul(a, b, block, out=torch.float32), a, b)


@needs_bf16
@pytest.mark.parametrize("micro", [(16, 8, 16), (8, 32, 8)])
def test_smt_dot(monkeypatch, micro):
    _on(monkeypatch, ZEN4)
    a, b = _int8(32, 64), _int8(64, 32)
    torch.testing.assert_close(run_dot(a, b, micro, out_dtype=tl.int32, out_torch=torch.int32), a.int() @ b.int(),
                               rtol=0, atol=0)
    x, y = torch.randn(32, 64).bfloat16(), torch.randn(64, 32).bfloat16()
    assert_bf16_product(run_dot(x, y, micro, out_dtype=tl.float32, out_torch=torch.float32), x, y)


@pytest.mark.skipif(not host_has("avx512f"), reason="the assembly is dumped by a host compile, for x86-64")
@pytest.mark.parametrize("dtype,env,instruction", [(torch.int8, CASCADE_LAKE, "vpdpbusd"),
                                                   (torch.bfloat16, ZEN4, "vdpbf16ps")])
def test_the_code_runs_on_dot_products(tmp_path, monkeypatch, dtype, env, instruction):
    assembly = _assembly(tmp_path, monkeypatch, dtype, **env)
    assert assembly.count(instruction) >= 16 and "tdpb" not in assembly
    if dtype == torch.int8:
        # A's row sums too (vpdpbusd against ones): no bytes widened to add them
        assert assembly.count(instruction) >= 17 and "vpmovsxb" not in assembly


@pytest.mark.skipif(not host_has("avx2"), reason="the assembly is dumped by a host compile, for x86-64")
def test_avx_vnni_code_uses_256_bit_registers(tmp_path, monkeypatch):
    assembly = _assembly(tmp_path, monkeypatch, torch.int8, **ALDER_LAKE)
    assert assembly.count("vpdpbusd") >= 12 and "%ymm" in assembly and "%zmm" not in assembly


@pytest.mark.skipif(not host_has("avx512f"), reason="the assembly is dumped by a host compile, for x86-64")
def test_bf16_stays_on_fma_on_intel(tmp_path, monkeypatch):
    """Intel's cores with AVX512-BF16 and no AMX keep bf16 on the FMA kernel, where it measured faster."""
    assembly = _assembly(tmp_path, monkeypatch, torch.bfloat16, SPINE_HOST_CPU="cooperlake")
    assert "vdpbf16ps" not in assembly and "vfmadd231ps" in assembly


def test_the_kernel_is_chosen_by_the_target_cpu():
    assert choose(X86, "icelake-server", "").name == "avx512-vnni"
    assert choose(X86, "cascadelake", "").name == "avx512-vnni"
    assert choose(X86, "znver4", "").name == "avx512-vnni-bf16"
    assert choose(X86, "znver4", "", matrix_unit=False).name == "avx512"
    assert choose(X86, "skylake-avx512", "").name == "avx512"
    assert choose(X86, "x86-64-v4", "+avx512vnni").name == "avx512-vnni"
    assert choose(X86, "alderlake", "").name == "avx2-vnni"
    assert choose(X86, "x86-64-v3", "+avxvnni").name == "avx2-vnni"
    assert choose(X86, "haswell", "").name == "avx2"


def _product_functions(assembly: str) -> int:
    """How many packed-matmul functions the kernel's assembly defines."""
    return len(set(re.findall(r"^(spine_smt_matmul_\w+):", assembly, re.MULTILINE)))


@needs_vnni
@pytest.mark.parametrize("m,n,k,block", [(160, 96, 256, (64, 32, 128)), (64, 64, 64, (64, 64, 64)),
                                         (128, 64, 0, (64, 32, 64)), (96, 64, 200, (32, 32, 64))])
def test_a_whole_tiles_last_product_adds_into_its_destination(monkeypatch, tmp_path, m, n, k, block):
    """compiler/carried_products.py: the last k step of a whole tile writes C itself. 160 x 96 in 64 x 32 tiles
    has whole tiles and a half row of edge tiles; one k step; K = 0, where the loop does not run and C gets
    the accumulator's zeros; K = 200, whose last step is masked (the loop over k as it is)."""
    _on(monkeypatch, CASCADE_LAKE)
    monkeypatch.setenv("SPINE_TRITON_DUMP_PATH", str(tmp_path))
    a, b = _int8(m, k), _int8(k, n)
    torch.testing.assert_close(_matmul(a, b, block), a.int() @ b.int(), rtol=0, atol=0)
    path, = glob.glob(os.path.join(tmp_path, "*.s"))
    with open(path) as f:
        assert _product_functions(f.read()) == 2        # the product, and its twin writing the destination


@needs_bf16
def test_bf16_whole_tiles_last_product_adds_into_its_destination(monkeypatch, tmp_path):
    _on(monkeypatch, ZEN4)
    monkeypatch.setenv("SPINE_TRITON_DUMP_PATH", str(tmp_path))
    a, b = torch.randn(160, 192).bfloat16(), torch.randn(192, 64).bfloat16()
    assert_bf16_product(_matmul(a, b, (64, 32, 64), out=torch.float32), a, b)
    path, = glob.glob(os.path.join(tmp_path, "*.s"))
    with open(path) as f:
        assert _product_functions(f.read()) == 2


@needs_vnni
def test_a_destination_overlapping_an_operand_gets_the_whole_product(monkeypatch):
    """C's bytes are A's, in one program: the launch runs the alias-safe variant, which copies each tile of A
    before its product, so the last product, written into C, reads no byte it writes."""
    _on(monkeypatch, CASCADE_LAKE)
    storage = torch.zeros(64 * 64 * 4, dtype=torch.uint8)
    a = storage[:64 * 128].view(torch.int8).view(64, 128)
    a.copy_(_int8(64, 128))
    b = _int8(128, 64)
    expected = a.int() @ b.int()
    c = storage.view(torch.int32).view(64, 64)
    matmul_kernel[(1, 1)](a, b, c, 64, 64, 128, *a.stride(), *b.stride(), *c.stride(), BM=64, BN=64, BK=64)
    torch.testing.assert_close(c, expected, rtol=0, atol=0)


@pytest.mark.skipif(not host_has("avx512f"), reason="the assembly is dumped by a host compile, for x86-64")
@pytest.mark.parametrize("env", [CASCADE_LAKE, {"SPINE_HOST_CPU": "sapphirerapids"}, ALDER_LAKE])
def test_the_twin_writing_the_destination_is_compiled_for_each_unit(tmp_path, monkeypatch, env):
    """VNNI, AMX tiles and AVX-VNNI: each emitter compiles the twin (C = C_in + A B into a view)."""
    assert _product_functions(_assembly(tmp_path, monkeypatch, torch.int8, **env)) == 2


@pytest.mark.parametrize("dtype,env", [(torch.int8, CASCADE_LAKE), (torch.int8, ALDER_LAKE), (torch.bfloat16, ZEN4)])
def test_b_is_packed_once_per_launch_on_each_thread(tmp_path, monkeypatch, dtype, env):
    """B's VNNI panels come from the runtime's per-thread panels (cpp/shared_panels.h) on every x86 dot-product
    kernel (compiled here, run below where the machine has the instructions)."""
    assembly = _assembly(tmp_path, monkeypatch, dtype, **env)
    assert re.search(r"\bcallq?\s+\*?spine_shared_panel", assembly), "no call of spine_shared_panel"


@needs_vnni
def test_a_kept_panel_is_packed_again_in_the_next_launch(monkeypatch):
    """Five row blocks share each column's B panel on a thread; B changed in place between launches (same
    address and strides) is packed again, on one thread and on several."""
    _on(monkeypatch, CASCADE_LAKE)
    a, b = _int8(160, 128), _int8(128, 96)
    for threads in (1, 4):
        for _ in range(2):
            c = torch.empty(160, 96, dtype=torch.int32)
            matmul_kernel[(5, 3)](a, b, c, 160, 96, 128, *a.stride(), *b.stride(), *c.stride(), BM=32, BN=32, BK=64,
                                  num_threads=threads)
            torch.testing.assert_close(c, a.int() @ b.int(), rtol=0, atol=0)
            b.copy_(_int8(128, 96))

