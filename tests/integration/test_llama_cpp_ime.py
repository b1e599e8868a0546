"""SpacemiT's own llama.cpp kernels for K1's matrix unit (ggml-cpu/spacemit, IME1: smt.vmadot in inline
assembly) and for K3's A100 (IME2: smt.vmadot at VLEN 1024, with smt.vpack.vv / smt.vupack.vv around it),
unmodified, under QEMU, whose CPU lacks the instructions: the emulation (cpp/matrix_emulation.c) is linked
in (bench/llama_cpp.py's riscv64-ime build) and carries out each one when it traps. IME2 runs as the A100:
SPACEMIT_CORE_ARCH=0xA064 on a VLEN 1024 guest, Q8_0 weights (ime2::gemm_kernel_i8i8, whose instructions
are the ones emulated; its Q4 kernels also need the block-scaled fp16 forms, which are not).

One MUL_MAT at each of SmolLM2-135M's weight shapes, through SpacemiT's buffer type, repack, activation
quantization and kernels, on inputs that make every output an exact integer: all of them right, and one
instruction emulated for every vmadot the kernels issue. ggml's libraries are built once and kept in
Spine's cache (under four minutes on two cores the first time); the checks take seconds. The whole model
through those kernels is `bench/llama_cpp.py riscv64-ime --prompt ...` (bench/RESULTS.md)."""
import os
import shutil
import sys

import pytest

REPO = os.path.join(os.path.dirname(__file__), "..", "..")
sys.path.insert(0, os.path.join(REPO, "bench"))

if not (shutil.which("qemu-riscv64") or shutil.which("qemu-riscv64-static")) or not shutil.which("cmake"):
    pytest.skip("needs qemu-riscv64 and cmake", allow_module_level=True)
import llama_cpp  # noqa: E402


@pytest.fixture(scope="module")
def ggml():
    try:
        return llama_cpp.build_libraries("riscv64-ime")
    except llama_cpp.SourceUnavailable as err:   # a machine without a package index: nothing to build from
        pytest.skip(str(err))


def vmadots(k: int, n: int, rows) -> int:
    """What ime1::gemm_kernel_i8i4 issues: rows four at a time (one 4 x 4 x 8 tile per vmadot), the rest one at
    a time (a row of the tile), each over every (4 columns, 8 of K) of the weight."""
    return sum(m // 4 + m % 4 for m in rows) * (n // 4) * (k // 8)


@pytest.mark.parametrize("k, n", llama_cpp.SMOLLM2_SHAPES)
def test_spacemit_matmul_is_exact_on_emulated_vmadot(ggml, k, n):
    check = llama_cpp.ime_matmul_check(k, n, llama_cpp.MATMUL_ROWS)
    assert check["wrong"] == {m: 0 for m in llama_cpp.MATMUL_ROWS}, check["log"][-2000:]
    assert check["emulated"] == vmadots(k, n, llama_cpp.MATMUL_ROWS)


def ime2_instructions(k: int, n: int, rows) -> int:
    """What ime2::gemm_kernel_i8i8 issues per 32 columns and block of 32 of K: four rows at a time 5 vupack,
    8 vmadot (8x16x8) and 4 vpack; one row at a time 4, 8 and 3."""
    return sum(m // 4 * 17 + m % 4 * 15 for m in rows) * (n // 32) * (k // 32)


@pytest.mark.parametrize("k, n", llama_cpp.SMOLLM2_SHAPES)
def test_spacemit_a100_matmul_is_exact_on_emulated_instructions(ggml, k, n):
    check = llama_cpp.ime_matmul_check(k, n, llama_cpp.MATMUL_ROWS, weights="q8_0", a100=True)
    assert check["wrong"] == {m: 0 for m in llama_cpp.MATMUL_ROWS}, check["log"][-2000:]
    assert check["emulated"] == ime2_instructions(k, n, llama_cpp.MATMUL_ROWS)


def test_an_instruction_count_leaves_the_emulation_out(ggml):
    """QEMU 7.2's counting plugin with the emulation's functions (and the signal return) left out counts a
    trapped vmadot as the one instruction it is on K1: a loop of vmadots grows by its 3 instructions a
    vmadot. Counted with them, each emulated vmadot costs hundreds (what the per-token count of llama.cpp's
    IME1 build, bench/llm.py --riscv64-per-token --ime, must not include). The instruction words the plugin
    records (for the per-token cycle estimate) are the same instructions, each vmadot classed as one."""
    import subprocess
    import qemu_plugin
    try:
        qemu_plugin.qemu()
    except (subprocess.CalledProcessError, OSError) as err:   # no package index to fetch QEMU 7.2 from
        pytest.skip(f"QEMU 7.2 for the plugin: {err}")
    (short, short_without, short_with, short_vmadots, short_words), (long, long_without, long_with, long_vmadots,
                                                                     long_words) = llama_cpp.emulation_count_check()
    assert long_without - short_without == 3 * (long - short)
    assert long_with - short_with > 100 * (long - short)
    # the words the plugin records for spine.count's cycle estimate: the same instructions, each vmadot once
    assert (short_words, long_words) == (short_without, long_without)
    assert long_vmadots - short_vmadots == long - short
