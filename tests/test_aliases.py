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
    "from triton.language.extra.cpu import libdevice; libdevice.erf; libdevice.gelu_tanh",
    "import triton.language.extra.tle as tle; tle.extract_tile, tle.insert_tile, tle.load",
    "from triton.language.extra.smt import *; mbarrier_copies, storage_kind",
])
def test_alias_imports_in_a_fresh_process(statement):
    # the way users write it: triton imported first, nothing of Spine's imported by hand
    subprocess.run([sys.executable, "-c", f"import triton; {statement}"], check=True)


TRITON_CPU_DRIVER_CHOICE = """
import torch, triton, triton.language as tl
from spine.driver import CPUDriver
triton.runtime.driver.set_active_to_cpu()
assert isinstance(triton.runtime.driver.active, CPUDriver), triton.runtime.driver.active
assert triton.runtime.driver.active.target.name == "host"
assert triton.runtime.driver.get_active_gpus() == []
try:
    triton.runtime.driver.set_active_to_gpu()
except RuntimeError as err:
    assert "0 GPU drivers are active" in str(err), err
else:
    raise AssertionError("set_active_to_gpu chose a driver on a machine without a GPU")

@triton.jit
def double(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)

x = torch.arange(10, dtype=torch.float32)
triton.runtime.driver.set_active_to_cpu()   # a second time: a fresh driver, as the fork's does
double[(1,)](x, 10, BLOCK=16)
assert torch.equal(x, torch.arange(10, dtype=torch.float32) * 2)
"""


def test_triton_cpus_driver_choice_works_as_written(monkeypatch, tmp_path):
    """triton-cpu's set_active_to_cpu / set_active_to_gpu / get_active_gpus on stock triton's driver, with
    nothing of Spine's imported before triton (the import is what the fork's code does first)."""
    monkeypatch.setenv("SPINE_TARGET", "host")
    script = tmp_path / "fork_code.py"      # a file: triton.jit reads the kernel's source from it
    script.write_text(TRITON_CPU_DRIVER_CHOICE)
    subprocess.run([sys.executable, str(script)], check=True)


TRITON_CPU_DO_BENCH = """
import time, torch, triton, triton.language as tl
from triton import knobs
triton.runtime.driver.set_active_to_cpu()

@triton.jit
def double(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)

x = torch.ones(10)
def fn():
    time.sleep(0.01)       # the Python around the launch: hook timing leaves it out
    double[(1,)](x, 10, BLOCK=16)

whole = triton.testing.do_bench(fn, warmup=1, rep=50)
launches = triton.testing.do_bench(fn, warmup=1, rep=50, measure_time_with_hooks=True)
assert whole >= 10, whole
assert 0 < launches < 5, launches
assert knobs.runtime.launch_enter_hook.calls == [] and knobs.runtime.launch_exit_hook.calls == []
median, low, high = triton.testing.do_bench(fn, rep=30, quantiles=[0.5, 0.2, 0.8], measure_time_with_hooks=True)
assert low <= median <= high < 5, (median, low, high)
"""


def test_triton_cpus_do_bench_times_launches_by_their_hooks(monkeypatch, tmp_path):
    """triton-cpu's `do_bench(..., measure_time_with_hooks=True)` on stock triton: only the time inside
    launches counts, and the hooks are gone afterwards."""
    monkeypatch.setenv("SPINE_TARGET", "host")
    script = tmp_path / "fork_bench.py"
    script.write_text(TRITON_CPU_DO_BENCH)
    subprocess.run([sys.executable, str(script)], check=True)
