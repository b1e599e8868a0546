"""The profiler's switches change behaviour at once and never need a cache wipe: PROTON_KERNEL_CAPTURE,
PROTON_OUTPUT and PROTON_VERBOSE act at launch or output time; TRITON_DISABLE_PROTON and triton's
instrumentation flag change the compiled code and are part of the compile key."""
import json
import os
import subprocess
import sys
import textwrap

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from spine.proton import profiler
from spine.proton.capture import capture_session

from .kernels import plain_kernel, scoped_kernel

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
N, BLOCK = 1000, 128


def _run(kernel, grid=(8,)):
    x = torch.rand(N)
    out = torch.empty(N)
    return kernel[grid](x, out, N, BLOCK=BLOCK)


def test_capture_records_every_launch_while_set(target, monkeypatch, compile_count):
    _run(plain_kernel)
    _run(scoped_kernel, grid=(2, 2))
    compiles = len(compile_count)
    monkeypatch.setenv("PROTON_KERNEL_CAPTURE", "1")
    session = capture_session()
    session.reset()
    _run(plain_kernel)
    _run(plain_kernel, grid=(4,))
    _run(scoped_kernel, grid=(2, 2))
    assert [launch.label for launch in session.launches] == ["plain_kernel[8,1,1]", "plain_kernel[4,1,1]",
                                                             "scoped_kernel[2,2,1]"]
    assert all(launch.duration_ns > 0 for launch in session.launches)
    monkeypatch.delenv("PROTON_KERNEL_CAPTURE")
    _run(plain_kernel)
    assert len(session.launches) == 3
    assert len(compile_count) == compiles  # capture changes no code: nothing recompiled


CAPTURE_SCRIPT = """
import torch, triton
from spine.driver import CPUDriver
from tests.proton.kernels import plain_kernel, scoped_kernel
triton.runtime.driver.set_active(CPUDriver(target="{target}"))
x = torch.rand(1000); out = torch.empty(1000)
for grid in ((8,), (3,)):
    plain_kernel[grid](x, out, 1000, BLOCK=128)
scoped_kernel[(2, 2)](x, out, 1000, BLOCK=128)
print("done")
"""


def _capture(target, tmp_path, output=None):
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(CAPTURE_SCRIPT.format(target=target)))
    env = dict(os.environ, PROTON_KERNEL_CAPTURE="1", PYTHONPATH=REPO)
    env.pop("PROTON_OUTPUT", None)
    if output:
        env["PROTON_OUTPUT"] = str(output)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_capture_writes_every_launch_at_exit(target, tmp_path):
    _capture(target, tmp_path, tmp_path / "capture.json")
    trace = json.loads((tmp_path / "capture.json").read_text())
    launched = [e["name"] for e in trace["traceEvents"] if e["ph"] == "X" and e["pid"] == 1]
    assert launched == ["plain_kernel[8,1,1]", "plain_kernel[3,1,1]", "scoped_kernel[2,2,1]"]
    table = _capture(target, tmp_path)
    assert table.startswith("done\n=== Spine CPU Proton: kernel capture ===")
    for label in ("plain_kernel[8,1,1]", "plain_kernel[3,1,1]", "scoped_kernel[2,2,1]"):
        assert label in table


def test_output_switch_chooses_the_file_and_format(target, instrumentation, monkeypatch, tmp_path, capsys):
    with profiler.profile(auto_dump=False):
        _run(scoped_kernel, grid=(2, 2))
    monkeypatch.setenv("PROTON_OUTPUT", str(tmp_path / "a.json"))
    profiler.dump()
    assert "traceEvents" in json.loads((tmp_path / "a.json").read_text())
    monkeypatch.setenv("PROTON_OUTPUT", str(tmp_path / "b.hatchet"))
    profiler.dump()
    assert json.loads((tmp_path / "b.hatchet").read_text())[0]["frame"]["name"] == "ROOT"
    monkeypatch.delenv("PROTON_OUTPUT")
    profiler.dump()
    assert "scoped_kernel[2,2,1]" in capsys.readouterr().out


def test_verbose_records_programs_and_adds_per_thread_detail(target, monkeypatch, capsys):
    with profiler.profile():
        _run(plain_kernel)
    assert len(profiler.session.launches[0].records) == 0
    assert "per grid thread" not in capsys.readouterr().out
    monkeypatch.setenv("PROTON_VERBOSE", "1")
    with profiler.profile():
        _run(plain_kernel)
    launch = profiler.session.launches[0]
    assert sorted(p.program[0] for p in launch.programs()) == list(range(8))
    out = capsys.readouterr().out
    assert "plain_kernel[8,1,1]" in out and "per grid thread" in out and "(programs)" in out


def test_disable_turns_the_profiler_off_without_a_cache_wipe(target, instrumentation, monkeypatch, fresh_cache,
                                                           compile_count, tmp_path):
    import triton.profiler as proton
    compiled = _run(scoped_kernel, grid=(2, 1))
    assert "spine_proton_record" in compiled.asm["llir"] and len(profiler.session.launches) == 1
    compiles = len(compile_count)  # 0 when an earlier test compiled it in this process
    monkeypatch.setenv("TRITON_DISABLE_PROTON", "1")
    monkeypatch.setenv("PROTON_KERNEL_CAPTURE", "1")
    profiler.reset()
    assert not profiler.is_available() and not profiler.start()
    proton.start(str(tmp_path / "off"), backend="cpu")
    compiled = _run(scoped_kernel, grid=(2, 1))
    proton.finalize()
    assert len(compile_count) == compiles + 1  # recompiled, in the same cache
    assert "spine_proton_record" not in compiled.asm["llir"]
    assert profiler.session.launches == [] and capture_session().launches == []
    assert not (tmp_path / "off.hatchet").exists()
    monkeypatch.delenv("TRITON_DISABLE_PROTON")
    monkeypatch.delenv("PROTON_KERNEL_CAPTURE")
    _run(scoped_kernel, grid=(2, 1))
    assert len(compile_count) == compiles + 1  # the instrumented kernel is still cached
    assert len(profiler.session.launches) == 1


def test_instrumentation_flag_switches_without_a_cache_wipe(target, fresh_cache, compile_count):
    from triton.profiler.flags import flags
    import triton.profiler.language as pl
    pl.enable_semantic("triton")
    _run(scoped_kernel, grid=(2, 1))
    assert profiler.session.launches == []
    compiles = len(compile_count)
    flags.instrumentation_on = True
    try:
        compiled = _run(scoped_kernel, grid=(2, 1))
        assert len(profiler.session.launches) == 1 and compiled.metadata.proton_scopes
    finally:
        flags.instrumentation_on = False
    compiled = _run(scoped_kernel, grid=(2, 1))
    assert len(profiler.session.launches) == 1 and not compiled.metadata.proton_scopes
    assert len(compile_count) <= compiles + 1  # at most the instrumented variant compiled


def _compiled(kernel):
    signature = {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}
    return triton.compile(ASTSource(kernel, signature, {(3,): BLOCK}), target=GPUTarget("cpu", "host", 1))


def test_without_instrumentation_the_generated_code_is_unchanged(fresh_cache, monkeypatch):
    from triton.profiler.flags import flags
    import triton.profiler.language as pl
    pl.enable_semantic("triton")
    off = _compiled(scoped_kernel)
    flags.instrumentation_on = True
    try:
        on = _compiled(scoped_kernel)
        monkeypatch.setenv("TRITON_DISABLE_PROTON", "1")
        disabled = _compiled(scoped_kernel)
    finally:
        flags.instrumentation_on = False
    assert "proton.record" not in off.asm["ttir"] and "proton.record" in on.asm["ttir"]
    assert on.asm["llir"].count("call void @spine_proton_record") == 8
    for stage in ("linalg", "llir", "so"):
        assert "spine_proton_record" not in str(off.asm[stage])
        assert off.asm[stage] == disabled.asm[stage], stage
