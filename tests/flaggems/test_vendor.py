"""FlagGems' SpacemiT vendor on Spine, in a fresh process (importing FlagGems activates its driver): its
tuning tables keyed by arch id find the chosen core's entries, and its smt-based mm runs under QEMU."""
import importlib.util
import os
import subprocess
import sys

import pytest

if importlib.util.find_spec("flag_gems") is None:
    pytest.skip("FlagGems is not installed: scripts/setup.sh installs it from ../shared/conformance",
                allow_module_level=True)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCRIPT = """
import torch, triton, flag_gems
from flag_gems.runtime.backend._spacemit.utils.config_pre_hook import LEGAL_CONFIGS, get_current_arch_id
assert get_current_arch_id() == {arch_id!r} and get_current_arch_id() in LEGAL_CONFIGS, get_current_arch_id()
assert triton.runtime.driver.active.get_current_target().arch == "riscv64:{core}"
a, b = torch.randn(37, 45), torch.randn(45, 29)
with flag_gems.use_gems():
    c = torch.mm(a, b)
torch.testing.assert_close(c, a @ b, atol=1e-4, rtol=1e-4)
print("ok")
"""


@pytest.mark.parametrize("core,arch_id", [("spacemit-x60", "0x503C"), ("0xA064", "0xA064")])
def test_flaggems_finds_the_cores_tuning_and_multiplies(core, arch_id):
    name = {"0xA064": "spacemit-a100"}.get(core, core)
    env = dict(os.environ, GEMS_VENDOR="spacemit", SPINE_TARGET="riscv64", SPINE_RISCV_CPU=core, PYTHONPATH=REPO)
    proc = subprocess.run([sys.executable, "-c", SCRIPT.format(arch_id=arch_id, core=name)], capture_output=True,
                          text=True, env=env, cwd="/tmp", timeout=900)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-3000:]
