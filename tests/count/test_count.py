"""python -m spine.count: deterministic guest instruction counts of one riscv64 launch under QEMU."""
import json
import os
import subprocess
import sys

import pytest
import torch

from spine import switches
from spine.count.__main__ import main
from spine.count.rvv import is_vector

KERNELS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernels.py")
CPU = switches.QEMU_CPU.default.replace("vlen=256", "vlen={}")


def _count(capsys, *extra) -> dict:
    assert main([f"{KERNELS}:add_kernel", "--signature", "*fp32,*fp32,*fp32,i32", "--constexpr", "BLOCK=256",
                 "--grid", "3", "--numel", "700", "--json", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_counts_are_deterministic_and_depend_on_vlen(capsys):
    first = _count(capsys, "--cpu", CPU.format(256))
    again = _count(capsys, "--cpu", CPU.format(256))
    narrow = _count(capsys, "--cpu", CPU.format(128))
    assert first == again
    assert len(first["per_program"]) == 3 and sum(first["per_program"]) == first["total"]
    assert first["per_program"][0] == first["per_program"][1]      # two full blocks cost the same
    assert 0 < first["vector"] < first["total"]
    # The same vector-length-agnostic code loops twice as often on a core with half the vector length.
    assert narrow["total"] > 1.5 * first["total"]


def test_arguments_from_a_function(capsys):
    assert main([f"{KERNELS}:add_kernel", "--signature", "*fp32,*fp32,*fp32,i32", "--constexpr", "BLOCK=256",
                 "--grid", "2", "--args-from", f"{KERNELS}:add_arguments"]) == 0
    out = capsys.readouterr().out
    assert "in 2 programs" in out and "program (1, 0, 0)" in out and "vector instructions" in out


def test_a_wrong_signature_is_reported(capsys):
    assert main([f"{KERNELS}:add_kernel", "--signature", "*fp32,i32", "--constexpr", "BLOCK=256",
                 "--grid", "1"]) == 2
    assert "2 types for 4" in capsys.readouterr().err


@pytest.mark.parametrize("word, vector", [
    (0x0D0572D7, True),    # vsetvli t0, a0, e32, m1, ta, ma
    (0x02056407, True),    # vle32.v v8, (a0)
    (0x020564A7, True),    # vse32.v v9, (a0)
    (0x02849457, True),    # vfadd.vv v8, v8, v9
    (0x00052507, False),   # flw fa0, 0(a0)
    (0x00A52027, False),   # fsw fa0, 0(a0)
    (0x00B50533, False),   # add a0, a0, a1
    (0x4501, False),       # c.li a0, 0
])
def test_vector_instructions_are_recognised(word, vector):
    assert is_vector(word) == vector


@pytest.mark.parametrize("option, value, message", [
    ("--numel", "-5", "--numel must be between 1 and 2,147,483,647"),
    ("--numel", "0", "--numel must be between 1 and"),
    ("--numel", "many", "--numel must be an integer"),
    ("--grid", "3000000000", "a grid size must be between 1 and 2,147,483,647"),
    ("--grid", "0", "a grid size must be between 1"),
    ("--grid", "4,-1", "a grid size must be between 1"),
    ("--grid", "1,2,3,4", "expected N, N,M or N,M,K"),
    ("--grid", "x", "a grid size must be an integer"),
    ("--grid", "65536,65536", "4,294,967,296 programs; counting traces at most"),
    ("--constexpr", "BLOCK", "expected NAME=VALUE"),
    ("--scalar", "n=ten", "must be an integer, a float, True or False"),
    ("--signature", "*fp33,i32", "unknown type 'fp33'"),
    ("--cpu", "rv64 v=true", "expected a QEMU -cpu string"),
    ("--args-from", f"{KERNELS}", "expected path/to/file.py:function"),
    ("--args-from", "no/such/file.py:f", "no/such/file.py: no such file"),
])
def test_bad_arguments_are_one_line_usage_errors(capsys, option, value, message):
    argv = [f"{KERNELS}:add_kernel", "--signature", "*fp32,*fp32,*fp32,i32", "--constexpr", "BLOCK=256",
            "--grid", "1", option, value]
    with pytest.raises(SystemExit) as exit:
        main(argv)
    assert exit.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("python -m spine.count: error: ")


@pytest.mark.parametrize("kernel", ["no/such/file.py:add_kernel", f"{KERNELS}", f"{KERNELS}:"])
def test_a_bad_kernel_argument_is_a_usage_error(capsys, kernel):
    with pytest.raises(SystemExit) as exit:
        main([kernel, "--signature", "i32", "--grid", "1"])
    assert exit.value.code == 2 and "error: argument kernel" in capsys.readouterr().err


def test_the_command_line_exits_2_without_a_traceback():
    for bad in (["--numel", "-5"], ["--grid", "3000000000"]):
        proc = subprocess.run([sys.executable, "-m", "spine.count", f"{KERNELS}:add_kernel", "--signature",
                               "*fp32,*fp32,*fp32,i32", "--constexpr", "BLOCK=256", "--grid", "1", *bad],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2, proc.stderr
        assert "Traceback" not in proc.stderr and "error: argument" in proc.stderr


def test_unknown_or_pointer_scalars_are_reported(capsys):
    for name in ("m", "x_ptr"):
        assert main([f"{KERNELS}:add_kernel", "--signature", "*fp32,*fp32,*fp32,i32", "--constexpr",
                     "BLOCK=256", "--grid", "1", "--scalar", f"{name}=3"]) == 2
        assert f"--scalar {name}: not a scalar run-time parameter of the kernel (those are: n)" \
            in capsys.readouterr().err


def test_a_missing_argument_function_is_reported(capsys):
    assert main([f"{KERNELS}:add_kernel", "--signature", "*fp32,*fp32,*fp32,i32", "--constexpr", "BLOCK=256",
                 "--grid", "1", "--args-from", f"{KERNELS}:no_such_function"]) == 2
    assert "defines no function 'no_such_function'" in capsys.readouterr().err


def test_a_launch_with_overlapping_arguments_counts_the_variant_that_ran():
    """A launch whose output overlaps an input runs the kernel's alias-safe variant; the count is that
    variant's (it copies each loaded tile first, so it costs more), not a failure to find the kernel."""
    import triton
    from spine.count import count_instructions
    from spine.driver import CPUDriver
    from tests.count.kernels import add_kernel
    triton.runtime.driver.set_active(CPUDriver(target="riscv64"))
    x = torch.arange(512, dtype=torch.float32)
    apart = count_instructions(lambda: add_kernel[(2,)](x, x, torch.empty_like(x), 512, BLOCK=256))
    shifted = x.clone()
    overlapping = count_instructions(lambda: add_kernel[(2,)](shifted[1:], shifted[1:], shifted[:-1], 511,
                                                              BLOCK=256))
    assert overlapping > apart > 0
    torch.testing.assert_close(shifted[:-1], 2 * x[1:])
