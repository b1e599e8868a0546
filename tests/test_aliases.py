"""Every module name spine/aliases.py serves imports and is the Spine module it stands for."""
import importlib
import subprocess
import sys

import pytest

from spine.aliases import ALIASES


@pytest.mark.parametrize("name", sorted(ALIASES))
def test_alias_imports_as_its_spine_module(name):
    assert importlib.import_module(name) is importlib.import_module(ALIASES[name])


@pytest.mark.parametrize("statement", [
    "from triton.backends.triton_shared.driver import CPUDriver",
    "from triton.backends.spine_triton.driver import CPUDriver",
    "import triton.language.extra.smt as smt; smt.dot",
    "from triton.language.extra.cpu import libdevice; libdevice.erf",
])
def test_alias_imports_in_a_fresh_process(statement):
    # the way users write it: triton imported first, nothing of Spine's imported by hand
    subprocess.run([sys.executable, "-c", f"import triton; {statement}"], check=True)
