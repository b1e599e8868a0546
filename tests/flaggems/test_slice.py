"""A seeded slice of FlagGems' own accuracy suite (../shared/conformance/flaggems-5.3.4, used in place) on
Spine, through its SpacemiT vendor: one case from each of SLICE_FILES files chosen by seed, on the host,
and a few on riscv64 under QEMU. Every failure must also fail on eager torch (the --eager rerun: FlagGems'
kernels and Spine left out) or be one torch refuses here (summary.TORCH_REFUSES): those are FlagGems' own.
tests/flaggems/run.sh runs the whole suite."""
import importlib.util
import os
import random
import subprocess
import sys

import pytest

from tests.flaggems.summary import classify, read

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SUITE = os.path.join(REPO, "..", "shared", "conformance", "flaggems-5.3.4")
SLICES = {"host": 12, "riscv64": 4}       # files, one case each (about 4 minutes on two cores)

if importlib.util.find_spec("flag_gems") is None or not os.path.isdir(SUITE):
    pytest.skip("FlagGems or its suite is missing: scripts/setup.sh installs it from ../shared/conformance",
                allow_module_level=True)


def _pytest(target: str, args: list, results: str, timeout: int) -> None:
    env = dict(os.environ, GEMS_VENDOR="spacemit", SPINE_TARGET=target,
               PYTHONPATH=os.path.join(REPO, "tests", "flaggems"))
    subprocess.run([sys.executable, "-m", "pytest", "-p", "spine_flaggems", "--results", results, "--ref", "cpu",
                    "--quick", "-q", "-p", "no:cacheprovider", "--continue-on-collection-errors", *args],
                   cwd=SUITE, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("target", sorted(SLICES))
def test_a_seeded_slice_of_flaggems_suite(target, tmp_path):
    files = sorted(f"tests/{name}" for name in os.listdir(os.path.join(SUITE, "tests"))
                   if name.startswith("test_") and name.endswith(".py"))
    chosen = random.Random(1).sample(files, SLICES[target])
    results, eager = str(tmp_path / "results.jsonl"), str(tmp_path / "eager.jsonl")
    _pytest(target, ["--sample-per-file", "1", "--sample-seed", "1", *chosen], results, 1500)
    cases = read(results)
    assert len(cases) >= SLICES[target] // 2, f"only {len(cases)} cases ran"
    failed = [c["test"] for c in cases if c["outcome"] == "failed"]
    if failed:
        _pytest(target, ["--eager", *failed], eager, 600)
    classify(cases, {c["test"]: c for c in read(eager)} if failed else {})
    ours = [f"{c['test']}: {c['message']}" for c in cases if c["outcome"] == "failed"]
    assert ours == [], "\n".join(ours)
    assert sum(c["outcome"] == "passed" for c in cases) >= len(cases) // 2
