"""tl.dot and smt.dot on K3 A100's matrix unit (`SPINE_RISCV_CPU=spacemit-a100`: spine/microkernels.py's "a100",
to_linalg/ime_matmul.py at the A100's tiles): int8 on 8x16x8 `smt.vmadot`, fp16 on 8x8x8 `smt.vfwmadot` (by its
encoding) with fp32 sums. The code assumes VLEN 1024, so it runs on a QEMU CPU of that VLEN, where the kernel
server emulates both instructions (cpp/matrix_emulation.c). int8 exact against torch; fp16 against fp32 sums
of the same (exact) products, on sizes that are not multiples of the 16 x 32 register block or the tiles."""
from __future__ import annotations

import glob
import os

import pytest
import torch
import triton
import triton.language as tl

from spine.driver.cpu_driver import _executor_for, vector_bits_of_binary
from spine.targets import min_vector_bits, riscv64_target
from tests.ops.test_matrix_unit import matmul_kernel, on_core
from tests.smt.test_dot import accumulate_kernel, run_dot

VFWMADOT = ".insn r 43, 4, 79"   # how the assembly prints smt.vfwmadot's encoding (0x2b, 100, 1001111)


@pytest.fixture
def a100(monkeypatch):
    on_core(monkeypatch, "spacemit-a100")


def _launch(a, b, c, block):
    (m, k), n = a.shape, b.shape[1]
    bm, bn, bk = block
    return matmul_kernel[(triton.cdiv(m, bm), triton.cdiv(n, bn))](
        a, b, c, m, n, k, *a.stride(), *b.stride(), *c.stride(), BM=bm, BN=bn, BK=bk,
        ACC=tl.int32 if c.dtype == torch.int32 else tl.float32)


def _matmul(a, b, out_dtype, block=(32, 32, 64)):
    c = torch.empty(a.shape[0], b.shape[1], dtype=out_dtype)
    _launch(a, b, c, block)
    return c


def _fp32_sums(a, b):
    """What fp16 operands give with every product exact and the sums in fp32 (one order of many)."""
    return (a.double() @ b.double()).float()


@pytest.mark.parametrize("m,n,k", [(37, 45, 70), (17, 100, 9)])
def test_int8_on_the_a100_tiles(a100, m, n, k):
    a, b = torch.randint(-128, 128, (m, k), dtype=torch.int8), torch.randint(-128, 128, (k, n), dtype=torch.int8)
    torch.testing.assert_close(_matmul(a, b, torch.int32), a.int() @ b.int(), rtol=0, atol=0)


@pytest.mark.parametrize("m,n,k", [(37, 45, 70), (17, 100, 9), (64, 64, 128)])
def test_fp16_with_fp32_sums(a100, m, n, k):
    a, b = torch.randn(m, k).half(), torch.randn(k, n).half()
    torch.testing.assert_close(_matmul(a, b, torch.float32), _fp32_sums(a, b), rtol=1e-5, atol=1e-4)


def test_fp16_sums_past_the_fp16_range(a100):
    """2,048 * 2,048 summed 64 times is 2^28: far past fp16's 65,504, and every partial sum exact in fp32."""
    a, b = torch.full((16, 64), 2048.0).half(), torch.full((64, 16), 2048.0).half()
    c = _matmul(a, b, torch.float32, block=(16, 16, 64))
    assert torch.equal(c, torch.full((16, 16), 2.0 ** 28))


def test_fp16_b_read_across_its_rows(a100):
    a, w = torch.randn(40, 72).half(), torch.randn(24, 72).half()
    torch.testing.assert_close(_matmul(a, w.t(), torch.float32, block=(32, 16, 32)), _fp32_sums(a, w.t()),
                               rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("micro", [(16, 8, 16), (8, 32, 8)])
def test_smt_dot_fp16_result(a100, micro):
    """smt.dot's default result type is the operands' (fp16): the fp32 sums rounded once."""
    a, b = torch.randn(32, 64).half(), torch.randn(64, 32).half()
    torch.testing.assert_close(run_dot(a, b, micro), _fp32_sums(a, b).half(), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("fused", [True, False])
def test_smt_dot_into_a_packed_accumulator(a100, fused):
    """acc = smt.dot(a, b, acc) sums in fp32 throughout; `acc += smt.dot(a, b)` adds each step's product as
    smt.dot returns it, in the operands' type (fp16), as on every other target."""
    a, b = torch.randn(32, 96).half(), torch.randn(96, 32).half()
    c = torch.empty(32, 32, dtype=torch.float32)
    accumulate_kernel[(1,)](a, b, c, M=32, N=32, K=96, KS=32, MM=16, MK=8, MN=16, FUSED=fused,
                            ACC_TYPE=tl.float32)
    if fused:
        expected = sum(_fp32_sums(a[:, k:k + 32], b[k:k + 32]).half().float() for k in range(0, 96, 32))
        torch.testing.assert_close(c, expected, rtol=1e-5, atol=2e-3)   # an fp16 rounding may differ
    else:
        torch.testing.assert_close(c, _fp32_sums(a, b), rtol=1e-5, atol=1e-4)


def test_smt_dot_int8(a100):
    a, b = torch.randint(-128, 128, (32, 64), dtype=torch.int8), torch.randint(-128, 128, (64, 32), dtype=torch.int8)
    torch.testing.assert_close(run_dot(a, b, (16, 8, 16), out_dtype=tl.int32, out_torch=torch.int32),
                               a.int() @ b.int(), rtol=0, atol=0)


def test_bf16_stays_on_vector_code(a100, tmp_path, monkeypatch):
    """bf16 would need the core's MCPM.BF16 bit set, which user code cannot do: RVV computes it."""
    a, b = torch.randn(32, 64).bfloat16(), torch.randn(64, 32).bfloat16()
    assembly = _assembly(tmp_path, monkeypatch, a, b, torch.float32)
    assert VFWMADOT not in assembly and "smt.vmadot" not in assembly


def _assembly(tmp_path, monkeypatch, a, b, out_dtype, **env) -> str:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("SPINE_TRITON_DUMP_PATH", str(tmp_path))
    c = _matmul(a, b, out_dtype)
    reference = a.int() @ b.int() if out_dtype == torch.int32 else _fp32_sums(a, b)
    torch.testing.assert_close(c, reference, rtol=1e-2 if a.dtype == torch.bfloat16 else 1e-5, atol=1e-2)
    path, = glob.glob(os.path.join(tmp_path, "matmul_kernel*.s"))
    with open(path) as f:
        return f.read()


def test_the_code_runs_on_the_a100_instructions(a100, tmp_path, monkeypatch):
    int8 = _assembly(tmp_path / "i8", monkeypatch, torch.randint(-128, 128, (32, 64), dtype=torch.int8),
                     torch.randint(-128, 128, (64, 32), dtype=torch.int8), torch.int32)
    fp16 = _assembly(tmp_path / "f16", monkeypatch, torch.randn(32, 64).half(), torch.randn(64, 32).half(),
                     torch.float32)
    assert int8.count("smt.vmadot") >= 8 and VFWMADOT not in int8
    assert fp16.count(VFWMADOT) >= 8 and "smt.vmadot" not in fp16


def test_no_matrix_instructions_when_switched_off(a100, tmp_path, monkeypatch):
    fp16 = _assembly(tmp_path, monkeypatch, torch.randn(32, 64).half(), torch.randn(64, 32).half(), torch.float32,
                     SPINE_MATRIX_UNIT="0")
    assert VFWMADOT not in fp16 and "vfmacc" in fp16


def _binary(kernel) -> bytes:
    """The shared object of a compiled kernel (triton keeps it among its stages)."""
    binary, = (v for v in kernel.asm.values() if isinstance(v, bytes) and v.startswith(b"\x7fELF"))
    return binary


def _exported_u64(binary: bytes, symbol: str) -> int | None:
    """The 64-bit value of a data symbol the shared object exports, None if it exports no such symbol."""
    import io
    from elftools.elf.elffile import ELFFile
    elf = ELFFile(io.BytesIO(binary))
    found = next((s for s in elf.get_section_by_name(".dynsym").iter_symbols() if s.name == symbol), None)
    if found is None:
        return None
    section = elf.get_section(found["st_shndx"])
    at = found["st_value"] - section["sh_addr"]
    return int.from_bytes(section.data()[at:at + 8], "little")


@pytest.mark.parametrize("cpu,marchid", [("spacemit-x60", 0x8000000041000001), ("generic-rv64", None)])
def test_k1_matrix_unit_code_names_cluster_0(monkeypatch, cpu, marchid):
    """An int8 product on K1's matrix unit runs on its cluster 0 only, which the A60's marchid stands for
    (spacemit_cores.placed_marchid); the same kernel without a matrix unit names no core."""
    on_core(monkeypatch, cpu)
    a, b = torch.randint(-128, 128, (8, 16), dtype=torch.int8), torch.randint(-128, 128, (16, 8), dtype=torch.int8)
    kernel = _launch(a, b, torch.empty(8, 8, dtype=torch.int32), (16, 16, 16))
    assert _exported_u64(_binary(kernel), "spine_core_marchid") == marchid


def test_a100_code_runs_on_a_vlen_1024_guest(a100):
    """The A100's code assumes VLEN 1024, and its binary says so (the RISC-V attributes' Zvl1024b), so QEMU
    runs it on a CPU of that VLEN; other riscv64 code keeps QEMU's configured one."""
    target = riscv64_target()
    assert min_vector_bits(target) == 1024 and min_vector_bits(riscv64_target("generic-rv64")) == 0
    a, b = torch.randint(-128, 128, (8, 16), dtype=torch.int8), torch.randint(-128, 128, (16, 8), dtype=torch.int8)
    c = torch.empty(8, 8, dtype=torch.int32)
    kernel = _launch(a, b, c, (16, 16, 16))
    torch.testing.assert_close(c, a.int() @ b.int(), rtol=0, atol=0)
    assert vector_bits_of_binary(_binary(kernel)) == 1024
    # where its grid runs (cpp/core_placement.c)
    assert _exported_u64(_binary(kernel), "spine_core_marchid") == 0x8000000041000002
    assert "vlen=1024" in _executor_for(target).server.cpu
    other = _executor_for(riscv64_target("generic-rv64"))
    assert other is not _executor_for(target) and other.vector_bits == 0
    assert _executor_for(riscv64_target("spacemit-x60")) is other   # VLEN 256: what QEMU is configured with
    assert vector_bits_of_binary(b"not an ELF file") == 0
