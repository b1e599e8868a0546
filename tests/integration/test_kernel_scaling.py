"""bench/kernel_scaling.py's matrix products, run by its C driver alone (as on a machine without Spine), give
exact results: the manifest passes each kernel the arguments it takes, and every tile shape's product (the
matrix units' included, where this machine's CPU has them) is checked against a triple loop."""
import os
import platform
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the driver is built for x86-64 Linux")
def test_every_product_of_the_matmul_manifest_is_exact(tmp_path):
    from spine.targets import host_target
    out = str(tmp_path / "ks")
    subprocess.run([sys.executable, os.path.join(ROOT, "bench", "kernel_scaling.py"), out, "--cpu", host_target().cpu,
                    "--matmul"], check=True, capture_output=True, text=True, cwd=ROOT)
    with open(os.path.join(out, "manifest.txt")) as f:
        lines = [line.split() for line in f if line.strip()]
    assert all("i1" not in line for line in lines)      # the unit strides are the binaries' constants
    text = subprocess.run([os.path.join(out, "kernel_scaling"), os.path.join(out, "manifest.txt"), "2", "check"],
                          check=True, capture_output=True, text=True).stdout
    rows = [line for line in text.splitlines() if line.startswith("| matmul_")]
    assert len(rows) == len(lines) == 30
    assert all(row.endswith("| exact |") for row in rows), text


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the driver is built for x86-64 Linux")
def test_every_kernel_of_the_scaling_manifest_runs(tmp_path):
    """The real kernels' manifest (tutorial 05's layer-norm backward among them, where the tutorials are
    beside the project) runs to the end in the C driver: the lock buffers start at zero (`z` arguments), so
    no program waits on a lock nobody holds, and every kernel gets a time."""
    from spine.targets import host_target
    out = str(tmp_path / "ks")
    subprocess.run([sys.executable, os.path.join(ROOT, "bench", "kernel_scaling.py"), out, "--cpu", host_target().cpu],
                   check=True, capture_output=True, text=True, cwd=ROOT)
    with open(os.path.join(out, "manifest.txt")) as f:
        names = [line.split()[0] for line in f if line.strip()]
    tutorials = os.path.join(ROOT, "..", "shared", "conformance", "triton-tutorials", "05-layer-norm.py")
    assert sum("layer-norm" in name for name in names) == (4 if os.path.exists(tutorials) else 0)
    text = subprocess.run([os.path.join(out, "kernel_scaling"), os.path.join(out, "manifest.txt"), "1", "only"],
                          check=True, capture_output=True, text=True, timeout=600).stdout
    times = {row.split("|")[1].strip(): float(row.split("|")[3]) for row in text.splitlines()
             if row.startswith("| ") and row.split("|")[2].strip() == "1"}
    assert sorted(times) == sorted(names) and all(t > 0 for t in times.values()), text
