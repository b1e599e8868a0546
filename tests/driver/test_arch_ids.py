"""SpacemiT arch ids: the driver's `current_arch_id` follows the chosen core, `GPUTarget`'s arch names it,
and an integer arch (spine-triton's `GPUTarget("cpu", 0, 0)`, or an arch id) compiles for it."""
import pytest
import torch
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget

from spine.driver import CPUDriver
from spine.spacemit_cores import CORES, core_named, core_of_arch_id

# spine-triton's own table (its backend's get_cpu_name_from_arch_id), written out here as the reference
SPINE_TRITON_IDS = {"0x503C": "spacemit-x60", "0x5064": "spacemit-x100", "0x50C8": "spacemit-x200",
                    "0xA03C": "spacemit-a60", "0xA064": "spacemit-a100", "0xA0C8": "spacemit-a200",
                    "0xF000": "spacemit-a200m"}


@triton.jit
def scale_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 3.0 + 1.0, mask=offs < n)


def test_the_table_is_spine_tritons():
    assert {c.arch_id_text: c.name for c in CORES} == SPINE_TRITON_IDS


@pytest.mark.parametrize("arch_id,name", sorted(SPINE_TRITON_IDS.items()))
def test_names_and_ids_map_both_ways(monkeypatch, arch_id, name):
    for chosen in (name, arch_id, arch_id.lower(), name.upper()):
        monkeypatch.setenv("SPINE_RISCV_CPU", chosen)
        driver = CPUDriver("riscv64")
        assert driver.current_arch_id == arch_id
        assert driver.get_current_target().arch == f"riscv64:{name}"
    assert core_of_arch_id(int(arch_id, 16)).name == name
    assert core_named(arch_id).name == name


def test_other_cpus_have_no_arch_id(monkeypatch):
    monkeypatch.setenv("SPINE_RISCV_CPU", "sifive-x280")
    assert CPUDriver("riscv64").current_arch_id is None
    assert CPUDriver("riscv64").get_current_target().arch == "riscv64"
    assert CPUDriver("host").current_arch_id is None


@pytest.mark.parametrize("bad", [0x1234, "0x1234", "0xZZ", True])
def test_an_unknown_id_is_a_clear_error(bad):
    with pytest.raises(ValueError, match="unknown SpacemiT arch id .* known ids are 0x503C \\(spacemit-x60\\)"):
        core_of_arch_id(bad)


def test_an_unknown_id_as_the_cpu_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("SPINE_RISCV_CPU", "0x1234")
    with pytest.raises(ValueError, match="unknown SpacemiT arch id '0x1234'"):
        CPUDriver("riscv64").current_arch_id


def _compile(arch):
    src = triton.compiler.ASTSource(fn=scale_kernel, signature={"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32",
                                                                "BLOCK": "constexpr"}, constexprs={"BLOCK": 64})
    return triton.compile(src, target=GPUTarget("cpu", arch, 0))


def test_an_integer_arch_compiles_for_its_core(target):
    x60 = _compile(0x503C)
    assert x60.asm["so"][18:20] == (243).to_bytes(2, "little")         # EM_RISCV
    assert "spacemit-x60" in x60.metadata.cpu
    # 0, as spine-triton's examples pass it: whatever the active driver compiles for
    default = _compile(0)
    assert default.metadata.arch == target
    # the stage spine-triton and triton-shared call ttsharedir is the linalg module
    assert default.asm["ttsharedir"] == default.asm["linalg"] and "linalg" in default.asm["ttsharedir"]
    with pytest.raises(ValueError, match="unknown SpacemiT arch id"):
        _compile(0x1234)


RUN_ON_CORE = """
import torch, triton
from spine.driver import CPUDriver
from tests.driver.test_arch_ids import scale_kernel
triton.runtime.driver.set_active(CPUDriver("riscv64"))
x = torch.randn(1000)
y = torch.empty_like(x)
scale_kernel[(triton.cdiv(1000, 64),)](x, y, 1000, BLOCK=64)
torch.testing.assert_close(y, x * 3 + 1)
print(triton.runtime.driver.active.current_arch_id)
"""


@pytest.mark.parametrize("core,qemu_vlen", [("spacemit-x60", 256), ("spacemit-a100", 1024), ("0xA064", 256)])
def test_kernels_for_a_core_run_and_are_right(core, qemu_vlen):
    """Code for a core LLVM does not know assumes no vector length: right under QEMU at the A100's VLEN
    of 1024 and at 256. (A fresh process: the QEMU server keeps the -cpu it started with.)"""
    import os
    import subprocess
    import sys
    from spine import switches
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, SPINE_TARGET="riscv64", SPINE_RISCV_CPU=core, PYTHONPATH=repo,
               SPINE_QEMU_CPU=switches.QEMU_CPU.default.replace("vlen=256", f"vlen={qemu_vlen}"))
    proc = subprocess.run([sys.executable, "-c", RUN_ON_CORE], capture_output=True, text=True, env=env, cwd=repo,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[-1] == core_named(core).arch_id_text
