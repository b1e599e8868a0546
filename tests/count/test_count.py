"""python -m spine.count: deterministic guest instruction counts of one riscv64 launch under QEMU."""
import json
import os

import pytest

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
