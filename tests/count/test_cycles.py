"""spine/count/cycles.py: instruction classes from encodings LLVM's assembler produced (not from our own
reading of the specification), and the estimate and multiply-accumulates of launches under QEMU."""
from __future__ import annotations

import io
import os
import subprocess
import tempfile

import pytest
import torch
import triton

from spine.count import count_launch
from spine.count.cycles import COSTS, UNITS, classes_of_words, classify, cycles_of, estimate, vsetvli_lanes
from spine.driver import CPUDriver
from spine.zig import zig_binary

# instruction -> class, as the X60 model costs it
EXPECTED = {
    "add a0, a1, a2": "alu", "addi a0, a0, 1": "alu", "c.addi a0, 1": "alu", "lui a0, 1": "alu",
    "czero.nez a0, a1, a2": "alu", "sh2add a0, a1, a2": "alu",
    "mul a0, a1, a2": "mul", "mulw a0, a1, a2": "mul", "div a0, a1, a2": "div64", "divw a0, a1, a2": "div32",
    "remu a0, a1, a2": "div64",
    "ld a0, 8(a1)": "load", "c.ld a0, 8(a1)": "load", "flw fa0, 4(a1)": "load", "sd a0, 8(a1)": "store",
    "fsw fa0, 4(a1)": "store", "c.sdsp a0, 8(sp)": "store",
    "beq a0, a1, .": "branch", "jal ra, .": "branch", "c.jr ra": "branch", "ret": "branch",
    "amoadd.w a0, a1, (a2)": "atomic",
    "fadd.s fa0, fa1, fa2": "fp", "fmadd.s fa0, fa1, fa2, fa3": "fma", "fdiv.s fa0, fa1, fa2": "fdiv32",
    "fsqrt.d fa0, fa1": "fdiv64", "fdiv.h fa0, fa1, fa2": "fdiv16",
    "vsetvli t0, a0, e32, m1, ta, ma": "vset", "vsetivli t0, 4, e8, m1, ta, ma": "vset",
    "vle32.v v8, (a0)": "vload", "vl4re32.v v8, (a0)": "vload", "vluxei32.v v8, (a0), v4": "vload",
    "vse32.v v8, (a0)": "vstore", "vsse32.v v8, (a0), a1": "vstore",
    "vadd.vv v8, v8, v9": "vint", "vand.vx v8, v8, a0": "vint", "vmslt.vx v0, v8, a0": "vint",
    "vsext.vf4 v8, v9": "vint",
    "vmul.vv v8, v8, v9": "vmul", "vmacc.vx v8, a0, v9": "vmacc", "vwmacc.vx v8, a0, v10": "vwmacc",
    "vwadd.vv v8, v10, v11": "vwide", "vdivu.vv v8, v8, v9": "vdiv",
    "vredsum.vs v8, v8, v9": "vother", "vslidedown.vi v8, v9, 1": "vother", "vrgather.vv v8, v9, v10": "vother",
    "vmv.x.s a0, v8": "vother", "vmv4r.v v8, v12": "vother",
    "vfadd.vv v8, v8, v9": "vfp", "vfmacc.vf v8, fa0, v9": "vfma", "vfmadd.vv v8, v9, v10": "vfma",
    "vfwmacc.vf v8, fa0, v10": "vfwma", "vfredusum.vs v8, v8, v9": "vfp",
    "smt.vmadot v16, v8, v9": "vmadot", "smt.vmadotsu v16, v8, v9": "vmadot",
    # K3 A100's smt.vfwmadot and its slide 3 (not in LLVM 22: by their encodings, the specification's 8.5)
    ".insn r 0x2b, 4, 0x4f, v16, v8, v9": "vfwmadot", ".insn r 0x2b, 7, 0x4f, v16, v8, v9": "vfwmadot",
}


def _assembled(lines: list) -> list:
    """Each line's encoding (its 32 bits, or its 16 for a compressed one), by zig's clang for the X60."""
    from elftools.elf.elffile import ELFFile
    with tempfile.TemporaryDirectory() as tmp:
        source, obj = os.path.join(tmp, "a.s"), os.path.join(tmp, "a.o")
        with open(source, "w") as f:
            f.write("".join(f"{line}\n" for line in lines))
        subprocess.run([zig_binary(), "cc", "-target", "riscv64-linux-gnu", "-mcpu=spacemit_x60+zicond", "-c",
                        source, "-o", obj], check=True, capture_output=True)
        with open(obj, "rb") as f:
            code = ELFFile(io.BytesIO(f.read())).get_section_by_name(".text").data()
    words, at = [], 0
    while at < len(code):
        half = int.from_bytes(code[at:at + 2], "little")
        size = 4 if half & 0b11 == 0b11 else 2
        words.append(int.from_bytes(code[at:at + size], "little"))
        at += size
    assert len(words) == len(lines), "an instruction assembled to more than one"
    return words


def test_classes_of_assembled_instructions():
    lines = list(EXPECTED)
    got = {line: classify(word) for line, word in zip(lines, _assembled(lines))}
    assert got == EXPECTED


def test_vector_lengths_of_vtypes():
    words = _assembled(["vsetvli t0, a0, e32, m1, ta, ma", "vsetvli t0, a0, e8, m4, ta, ma",
                        "vsetivli t0, 4, e16, mf2, ta, ma", "vsetvl t0, a0, a1"])
    assert [vsetvli_lanes(w, 256) for w in words] == [8, 128, 8, None]


def test_the_estimate_is_the_busiest_resource_or_the_issue_width():
    """4 vfmacc.vf at e32 m1 after a vsetvli, 10 times; 100 divides: the integer unit's 2,000 cycles over its
    two units bound the estimate."""
    words = _assembled(["vsetvli t0, a0, e32, m1, ta, ma", "vfmacc.vf v8, fa0, v9", "div a0, a1, a2"])
    code = {0: words[0], 4: words[1], 8: words[2]}
    result = estimate({0: 10, 4: 40, 8: 100}, code.__getitem__, 0, 12, 256)
    assert result.macs == 40 * 8
    assert result.busy["IEU"] == (10 * 1 + 100 * 20) / UNITS["IEU"] and result.cycles == result.busy["IEU"]
    assert result.bound_by == "IEU" and result.classes == {"vset": 10, "vfma": 40, "div64": 100}
    assert all(resource in UNITS for resource, _ in COSTS.values())


def test_words_counted_whole_give_the_same_cycles():
    """A program counted as instruction words and their counts (QEMU's plugin, whose code order is unknown):
    the classes and cycles the estimate gives the same instructions by address, a compressed one by its
    16 bits."""
    words = _assembled(["vsetvli t0, a0, e32, m1, ta, ma", "vfmacc.vf v8, fa0, v9", "div a0, a1, a2",
                        "c.addi a0, 1"])
    code = {0: words[0], 4: words[1], 8: words[2], 12: words[3]}
    by_address = estimate({0: 10, 4: 40, 8: 100, 12: 7}, code.__getitem__, 0, 14, 256)
    classes = classes_of_words({words[0]: 10, words[1]: 40, words[2]: 100, words[3]: 7})
    assert classes == by_address.classes and classes["alu"] == 7
    assert cycles_of(classes) == (by_address.cycles, by_address.busy)


@pytest.mark.parametrize("cpu,instruction", [("spacemit-x60", "vmadot"), ("generic-rv64", "vmacc")])
def test_an_int8_matmul_counts_its_multiply_accumulates(monkeypatch, cpu, instruction):
    """64^3 int8 on K1's matrix unit: exactly 64^3 multiply-accumulates, 128 per smt.vmadot; on the vector
    code, vmacc/vwmacc at the vector length (at least 64^3: padding)."""
    from tests.ops.test_matrix_unit import matmul_kernel
    monkeypatch.setenv("SPINE_TARGET", "riscv64")
    monkeypatch.setenv("SPINE_RISCV_CPU", cpu)
    triton.runtime.driver.set_active(CPUDriver(target="riscv64"))
    size = 64
    a = torch.randint(-128, 128, (size, size), dtype=torch.int8)
    b = torch.randint(-128, 128, (size, size), dtype=torch.int8)
    c = torch.empty(size, size, dtype=torch.int32)
    counted = count_launch(lambda: matmul_kernel[(1, 1)](a, b, c, size, size, size, *a.stride(), *b.stride(),
                                                         *c.stride(), BM=64, BN=64, BK=64))
    assert torch.equal(c, a.int() @ b.int())
    x60 = counted.x60
    if instruction == "vmadot":
        assert x60.classes["vmadot"] == size ** 3 // 128 and x60.macs == size ** 3
    else:
        assert "vmadot" not in x60.classes and size ** 3 <= x60.macs <= 1.25 * size ** 3
    assert x60.cycles >= counted.total / 2


@pytest.mark.parametrize("dtype", ["int8", "fp16"])
def test_a100_matmuls_count_their_multiply_accumulates(monkeypatch, dtype):
    """64^3 on K3 A100's matrix unit (a VLEN 1024 guest): exactly 64^3 multiply-accumulates, 1,024 per
    smt.vmadot (8x16x8) and 512 per smt.vfwmadot (8x8x8)."""
    from tests.ops.test_matrix_unit_a100 import _launch
    monkeypatch.setenv("SPINE_TARGET", "riscv64")
    monkeypatch.setenv("SPINE_RISCV_CPU", "spacemit-a100")
    triton.runtime.driver.set_active(CPUDriver(target="riscv64"))
    size = 64
    if dtype == "int8":
        a, b = (torch.randint(-128, 128, (size, size), dtype=torch.int8) for _ in range(2))
        c = torch.empty(size, size, dtype=torch.int32)
    else:
        a, b = torch.randn(size, size).half(), torch.randn(size, size).half()
        c = torch.empty(size, size)
    counted = count_launch(lambda: _launch(a, b, c, (64, 64, 64)))
    cls, per = ("vmadot", 1024) if dtype == "int8" else ("vfwmadot", 512)
    assert counted.x60.classes[cls] == size ** 3 // per and counted.x60.macs == size ** 3
