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
