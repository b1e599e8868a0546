"""Sessions around kernels: triton's `proton.start(backend="cpu")` API and spine-triton's `profiler`."""
import json

import torch
import triton
import triton.profiler as proton

from .kernels import plain_kernel, scoped_kernel

N, BLOCK = 2000, 256


def _launch_both():
    x = torch.rand(N)
    out = torch.empty(N)
    scoped_kernel[(4, 2)](x, out, N, BLOCK=BLOCK)
    plain_kernel[(8,)](x, out, N, BLOCK=BLOCK)
    torch.testing.assert_close(out, x + 1)


def _tree(path):
    import hatchet
    with open(path) as f:
        literal = json.load(f)
    return literal, hatchet.GraphFrame.from_literal(literal)


def _children(node):
    return {c["frame"]["name"]: c for c in node["children"]}


def test_triton_start_with_the_cpu_backend(target, instrumentation, tmp_path):
    name = str(tmp_path / "run")
    session = proton.start(name, backend="cpu")
    assert session is not None
    for _ in range(2):
        with proton.scope("step", {"flops": 10}):
            _launch_both()
    proton.finalize()
    literal, gf = _tree(name + ".hatchet")
    step = _children(literal[0])["step"]
    assert step["metrics"]["count"] == 2 and step["metrics"]["flops"] == 20
    kernels = _children(step)
    assert kernels["scoped_kernel"]["metrics"]["count"] == 2
    assert kernels["plain_kernel"]["metrics"]["count"] == 2
    assert kernels["scoped_kernel"]["frame"]["target"].startswith(target)
    outer = _children(kernels["scoped_kernel"])["outer"]
    assert outer["metrics"]["count"] == 2 * 8
    assert set(_children(outer)) == {"load", "compute", "store"}
    assert {"step", "scoped_kernel", "plain_kernel", "outer", "load"} <= set(gf.dataframe["name"])


def test_start_without_a_backend_picks_the_cpu_profiler(target, tmp_path):
    name = str(tmp_path / "trace")
    proton.start(name, data="trace")
    _launch_both()
    proton.finalize()
    trace = json.loads((tmp_path / "trace.chrome_trace").read_text())
    kernels = {e["args"]["kernel"] for e in trace["traceEvents"] if e.get("ph") == "X" and e["pid"] > 1}
    assert kernels == {"scoped_kernel", "plain_kernel"}


def test_finalize_format_and_deactivate(target, tmp_path):
    name = str(tmp_path / "prof")
    session = proton.start(name, backend="cpu")
    _launch_both()
    proton.deactivate(session)
    _launch_both()   # not recorded
    proton.activate(session)
    with proton.scope("again"):
        _launch_both()
    proton.finalize(session, "chrome_trace")
    trace = json.loads((tmp_path / "prof.chrome_trace").read_text())
    launches = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e["pid"] == 1 and "kernel" in e.get("args", {})]
    assert len(launches) == 4
    assert any(e["name"] == "again" for e in trace["traceEvents"])


def test_a_finalized_session_stops_listening(target, tmp_path):
    from spine.proton import session as sessions
    proton.start(str(tmp_path / "a"), backend="cpu")
    proton.finalize()
    assert sessions.plan_launch(instrumented=False) is None


def test_spine_triton_profiler_api(target, tmp_path):
    from triton.backends.spine_triton.proton import profiler
    from triton.backends.spine_triton import proton as spine_proton
    assert profiler.is_available() and spine_proton.profiler is profiler
    with profiler.profile(str(tmp_path / "p.hatchet")):
        _launch_both()
    _, gf = _tree(tmp_path / "p.hatchet")
    assert {"scoped_kernel", "plain_kernel"} <= set(gf.dataframe["name"])
    profiler.reset()
    profiler.start()
    _launch_both()
    profiler.stop()
    _launch_both()   # stopped: plain kernels are not kept
    results = profiler.get_results()
    assert [launch["kernel"] for launch in results["launches"]] == ["scoped_kernel", "plain_kernel"]
    assert results["kernels"]["plain_kernel[8,1,1]"]["launches"] == 1
    assert results["counters"][0]["unit"] == "ticks"
    assert profiler.dump(str(tmp_path / "d.json"))
    assert json.loads((tmp_path / "d.json").read_text())["traceEvents"]
    profiler.reset()
    assert profiler.get_results()["launches"] == []


def test_dump_prints_a_table_without_an_output(target, instrumentation, capsys):
    from spine.proton import profiler
    with profiler.profile():
        _launch_both()
    out = capsys.readouterr().out
    assert "scoped_kernel[4,2,1]" in out and "plain_kernel[8,1,1]" in out
    assert "counter: " in out and ("GHz" in out or "MHz" in out)
    for scope in ("outer", "load", "compute", "store"):
        assert scope in out


def test_the_proton_command_line_profiles_a_script(tmp_path):
    import os
    import subprocess
    import sys
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    script = tmp_path / "script.py"
    script.write_text("import torch\nfrom tests.proton.kernels import plain_kernel\n"
                      "x = torch.rand(1000); out = torch.empty(1000)\n"
                      "plain_kernel[(8,)](x, out, 1000, BLOCK=128)\n")
    env = dict(os.environ, SPINE_TARGET="host", PYTHONPATH=repo)
    proc = subprocess.run([sys.executable, "-m", "triton.profiler.proton", "-n", str(tmp_path / "cli"), str(script)],
                          capture_output=True, text=True, env=env, timeout=600, cwd=repo)
    assert proc.returncode == 0, proc.stderr
    literal, _ = _tree(tmp_path / "cli.hatchet")
    assert _children(literal[0])["plain_kernel"]["metrics"]["count"] == 1


SPINE_TRITON_SPELLING = """
import torch, triton
import triton.profiler.proton as proton          # spine-triton's examples import the API by this name
from triton.backends.spine_triton.driver import CPUDriver
from tests.proton.kernels import plain_kernel
triton.runtime.driver.set_active(CPUDriver())
x = torch.rand(1000); out = torch.empty(1000)
proton.start({name!r}, backend="cpu")
for _ in range(3):
    with proton.scope("loop"):
        plain_kernel[(8,)](x, out, 1000, BLOCK=128)
proton.finalize()
assert proton.scope is triton.profiler.scope
"""


def test_spine_tritons_spelling_of_the_api(tmp_path):
    """`import triton.profiler.proton as proton` in a fresh process: the command line's module carries the
    package's scope/start/finalize, as spine-triton's patched triton has it."""
    import os
    import subprocess
    import sys
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    script = tmp_path / "script.py"
    script.write_text(SPINE_TRITON_SPELLING.format(name=str(tmp_path / "run")))
    env = dict(os.environ, SPINE_TARGET="host", PYTHONPATH=repo)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=600,
                          cwd=repo)
    assert proc.returncode == 0, proc.stderr
    literal, _ = _tree(tmp_path / "run.hatchet")
    loop = _children(literal[0])["loop"]
    assert loop["metrics"]["count"] == 3
    assert _children(loop)["plain_kernel"]["metrics"]["count"] == 3
