"""The emulation of SpacemiT's matrix instructions (cpp/matrix_emulation.c) under QEMU, on the instructions
themselves: a guest program (matrix_emulation_check.c, assembled by zig's clang, which knows the integer ones
as `smt.vmadot*` and takes A100's `smt.vfwmadot*` as encodings) runs one instruction on given registers.

The reference is SpacemiT's specification ("AI Matrix Extension (Zvvm_spacemit)" v0.6): its worked A60
examples (chapters 5.1.6 and 5.2.6) and A100 fp16 example (6.1.7) to the last bit, and its pseudo-code for
every signedness and slide on random registers, at VLEN 256 (K1: 4x8x4 tiles) and 1024 (K3's A100: 8x16x8
int8, 8x8x8 fp16 with fp32 sums)."""
from __future__ import annotations

import os
import shutil
import subprocess

import numpy as np
import pytest

from spine import switches
from spine.driver.qemu import GUEST_SYSROOT
from spine.driver.toolchain import CPP_DIR, GUEST_ZIG_TARGET
from spine.zig import zig

pytestmark = pytest.mark.skipif(shutil.which("qemu-riscv64") is None or not os.path.isdir(GUEST_SYSROOT),
                                reason="needs qemu-riscv64 and the riscv64 sysroot")

HERE = os.path.dirname(os.path.abspath(__file__))
# index in matrix_emulation_check.c -> (slide, A signed, B signed)
INSTRUCTIONS = {0: (0, 1, 1), 1: (0, 0, 0), 2: (0, 1, 0), 3: (0, 0, 1), 4: (1, 1, 1), 5: (2, 1, 1),
                6: (3, 1, 1), 7: (1, 0, 0), 8: (2, 1, 0), 9: (3, 0, 1)}
ILLEGAL_LMUL = 10
# index -> slide of smt.vfwmadot, smt.vfwmadot1, 2, 3
FLOAT_INSTRUCTIONS = {11: 0, 12: 1, 13: 2, 14: 3}

# The specification's A60 example: A is the feature map of 5.2.6 (its first four rows are 5.1.6's A), B the
# weights, each as the registers hold them (B column by column).
SPEC_A = [0, 1, 2, 3, 4, 5, 6, 7, 1, 2, 3, 4, 5, 6, 7, 8, 2, 3, 4, 5, 6, 7, 8, 9, 4, 5, 6, 7, 8, 9, 10, 11,
          5, 6, 7, 8, 9, 10, 11, 12, 6, 7, 8, 9, 10, 11, 12, 13] + [0] * 16
SPEC_B = [0, 1, 2, 3, 4, 5, 6, 7, 1, 2, 3, 4, 5, 6, 7, 8, 2, 3, 4, 5, 6, 7, 8, 9, 11, 4, 5, 6, 7, 8, 9, 10]
SPEC_VMADOT = [[140, 168, 196, 224], [168, 204, 240, 284], [196, 240, 284, 344], [252, 312, 372, 464]]
# vmadot1 after vmadot, into the same registers. The specification prints 224 at (0, 3), the value before
# the instruction; its own next table (vmadot2 after this one: 852 there) needs 508 = 224 + 284, which is
# what the pseudo-code gives, so 508 it is.
SPEC_VMADOT1 = [[308, 372, 436, 508], [364, 444, 524, 628], [448, 552, 656, 808], [532, 660, 788, 988]]
SPEC_VMADOT2 = [[504, 612, 720, 852], [616, 756, 896, 1092], [728, 900, 1072, 1332], [840, 1044, 1248, 1572]]


@pytest.fixture(scope="module")
def program(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("emulation") / "check")
    zig("cc", "-target", GUEST_ZIG_TARGET, "-mcpu=generic_rv64+m+a+f+d+c+v+xsmtvdot", "-O2", f"-I{CPP_DIR}",
        os.path.join(HERE, "matrix_emulation_check.c"), os.path.join(CPP_DIR, "matrix_emulation.c"), "-o", path)
    return path


def _qemu_cpu(vlen: int) -> str:
    return switches.QEMU_CPU.default.replace("vlen=256", f"vlen={vlen}")


def run(program: str, which: int, a: bytes, b: bytes, c: np.ndarray, vlen: int = 256):
    """(return code, the destination pair as c's type: int32 or float32) after instruction `which`."""
    dtype = "<f4" if c.dtype == np.float32 else "<i4"
    proc = subprocess.run(["qemu-riscv64", "-L", GUEST_SYSROOT, "-cpu", _qemu_cpu(vlen), program],
                          input=bytes([which]) + a + b + c.astype(dtype).tobytes(), capture_output=True,
                          timeout=60)
    return proc.returncode, np.frombuffer(proc.stdout, dtype=dtype)


def reference(a: bytes, b: bytes, c: np.ndarray, slide: int, a_signed: int, b_signed: int, vlen: int):
    """The specification's pseudo-code, literally."""
    tile, k = (4, 8) if vlen == 256 else (8, 16)
    av = np.frombuffer(a, dtype=np.int8 if a_signed else np.uint8).astype(np.int64)
    bv = np.frombuffer(b, dtype=np.int8 if b_signed else np.uint8).astype(np.int64)
    out = c.astype(np.int64).copy()
    for p in range(tile * tile):
        i, j = (p // tile) * k, (p % tile) * k
        out[p] += sum(av[i + q + slide * k] * bv[j + q] for q in range(k))
    return ((out + 2**31) % 2**32 - 2**31).astype(np.int32)


def test_the_specifications_worked_examples(program):
    a, b = bytes(SPEC_A), bytes(SPEC_B)
    rc, c = run(program, 0, a, b, np.zeros(16, np.int32))
    assert rc == 0 and c.reshape(4, 4).tolist() == SPEC_VMADOT
    rc, c = run(program, 4, a, b, c)
    assert rc == 0 and c.reshape(4, 4).tolist() == SPEC_VMADOT1
    rc, c = run(program, 5, a, b, c)
    assert rc == 0 and c.reshape(4, 4).tolist() == SPEC_VMADOT2


@pytest.mark.parametrize("vlen", [256, 1024])
@pytest.mark.parametrize("which", sorted(INSTRUCTIONS))
def test_every_signedness_and_slide_on_random_registers(program, which, vlen):
    rng = np.random.default_rng(which * 7 + vlen)
    vlenb = vlen // 8
    a, b = rng.integers(0, 256, 2 * vlenb, dtype=np.uint8).tobytes(), rng.integers(0, 256, vlenb, dtype=np.uint8).tobytes()
    c = rng.integers(-2**31, 2**31, 2 * vlenb // 4, dtype=np.int64).astype(np.int32)
    c[:4] = [2**31 - 1, -2**31, 2**31 - 100, -2**31 + 100]     # the accumulator wraps as 32 bits do
    rc, out = run(program, which, a, b, c, vlen)
    assert rc == 0
    np.testing.assert_array_equal(out, reference(a, b, c, *INSTRUCTIONS[which], vlen))


def test_an_illegal_form_stays_illegal(program):
    """LMUL 2 is reserved: the specification says it raises an illegal-instruction exception, and the
    emulation leaves it raised."""
    rc, _ = run(program, ILLEGAL_LMUL, bytes(64), bytes(32), np.zeros(16, np.int32))
    assert rc == -4    # SIGILL


def test_vlen_512_has_no_matrix_shape(program):
    """No SpacemiT core has VLEN 512; the specification defines no tile for it, so nothing is emulated."""
    rc, _ = run(program, 0, bytes(128), bytes(64), np.zeros(32, np.int32), vlen=512)
    assert rc == -4


def float_reference(a: np.ndarray, b: np.ndarray, c: np.ndarray, slide: int) -> np.ndarray:
    """6.2.3's pseudo-code, literally: each fp16 product (exact in fp32) added in turn, rounded to fp32."""
    av, bv = a.astype(np.float32), b.astype(np.float32)
    out = c.astype(np.float32).copy()
    for p in range(64):
        i, j = (p // 8) * 8 + slide * 8, (p % 8) * 8
        for q in range(8):
            out[p] = np.float32(out[p] + av[i + q] * bv[j + q])
    return out


def _halves(values: np.ndarray, registers: int) -> bytes:
    """fp16 values laid out from the first register on, zeros after them, in `registers` of VLEN 1024."""
    data = np.zeros(64 * registers, np.float16)
    data[:len(values)] = values
    return data.tobytes()


def test_the_specifications_fp16_example(program):
    """6.1.7: A and B^T both rows r, r + 1, ..., r + 7 (r = 0 .. 7); C[i][j] = sum over k of (i + k)(j + k)."""
    rows = np.array([[r + q for q in range(8)] for r in range(8)], np.float16).ravel()
    rc, c = run(program, 11, _halves(rows, 2), _halves(rows, 1), np.zeros(64, np.float32), vlen=1024)
    assert rc == 0
    expected = [[sum((i + q) * (j + q) for q in range(8)) for j in range(8)] for i in range(8)]
    assert c.reshape(8, 8).tolist() == expected   # the pair vd, vd+1 holds the 8 x 8 fp32 sums
    assert expected[0] == [140, 168, 196, 224, 252, 280, 308, 336] and expected[7][7] == 924   # as printed


@pytest.mark.parametrize("which", sorted(FLOAT_INSTRUCTIONS))
def test_fp16_forms_on_random_registers(program, which):
    """Every slide, on random fp16 operands (subnormals, and an infinity in a row the slide skips or reads)
    added to random fp32 sums: bit for bit the pseudo-code's fp32 arithmetic."""
    rng = np.random.default_rng(which)
    a = (rng.standard_normal(128) * 4).astype(np.float16)
    b = (rng.standard_normal(64) * 4).astype(np.float16)
    a[5], a[70], b[3] = np.float16(3e-6), np.float16(np.inf), np.float16(-6e-8)   # two subnormals
    c = (rng.standard_normal(64) * 100).astype(np.float32)
    rc, out = run(program, which, a.tobytes(), b.tobytes(), c, vlen=1024)
    assert rc == 0
    np.testing.assert_array_equal(out, float_reference(a, b, c, FLOAT_INSTRUCTIONS[which]))


def test_fp16_forms_need_the_a100(program):
    """K1's cores (VLEN 256) have no floating-point matrix instructions: the instruction stays illegal."""
    rc, _ = run(program, 11, bytes(64), bytes(32), np.zeros(16, np.float32))
    assert rc == -4


# index -> (vpack or vupack, chunk bytes) of the layout instructions in matrix_emulation_check.c
LAYOUT_INSTRUCTIONS = {15: ("pack", 16), 16: ("unpack", 16), 17: ("pack", 2), 18: ("unpack", 64)}


def layout_reference(kind: str, a: bytes, b: bytes, chunk: int, vlenb: int = 128) -> bytes:
    """vpack: vs1's and vs2's chunks in turn into the pair; vupack: the even chunks of vs1 then of vs2 into
    vd, the odd ones into vd+1 (the reading SpacemiT's IME2 kernels compute exact products with)."""
    a, b = a[:vlenb], b[:vlenb]
    chunks = lambda x: [x[i:i + chunk] for i in range(0, len(x), chunk)]
    if kind == "pack":
        return b"".join(x + y for x, y in zip(chunks(a), chunks(b)))
    return b"".join(chunks(a)[0::2] + chunks(b)[0::2] + chunks(a)[1::2] + chunks(b)[1::2])


@pytest.mark.parametrize("which", sorted(LAYOUT_INSTRUCTIONS))
def test_layout_instructions_on_random_registers(program, which):
    rng = np.random.default_rng(which)
    a, b = rng.integers(0, 256, 256, dtype=np.uint8).tobytes(), rng.integers(0, 256, 128, dtype=np.uint8).tobytes()
    c = rng.integers(-2**31, 2**31, 64, dtype=np.int64).astype(np.int32)
    rc, out = run(program, which, a, b, c, vlen=1024)
    assert rc == 0
    kind, chunk = LAYOUT_INSTRUCTIONS[which]
    assert out.tobytes() == layout_reference(kind, a, b, chunk)


def test_layout_instructions_need_the_a100(program):
    rc, _ = run(program, 15, bytes(64), bytes(32), np.zeros(16, np.int32))
    assert rc == -4
