"""The profiler's files: a Chrome trace with a track per thread and scopes nested in kernels, a hatchet
tree, the table and the viewer; each says which counter it read, in what unit, at what frequency."""
import json

import torch

from spine.proton import profiler
from spine.proton.viewer import load_graphframe, main as viewer_main

from .kernels import scoped_kernel

N, BLOCK = 4000, 256


def _profile(path):
    x = torch.rand(N)
    out = torch.empty(N)
    with profiler.profile(str(path) if path else None):
        for _ in range(2):
            scoped_kernel[(8, 2)](x, out, N, BLOCK=BLOCK)
    torch.testing.assert_close(out, x * 2 + 1)


def _slices(trace):
    return [e for e in trace["traceEvents"] if e["ph"] == "X"]


def test_chrome_trace_has_a_track_per_thread_with_scopes_nested_in_kernels(target, instrumentation, tmp_path):
    _profile(tmp_path / "t.json")
    trace = json.loads((tmp_path / "t.json").read_text())
    names = {(e["pid"], e.get("tid")): e["args"]["name"] for e in trace["traceEvents"]
             if e["ph"] == "M" and e["name"] in ("process_name", "thread_name")}
    kernel_pid = next(pid for (pid, tid), name in names.items() if tid is None and "kernels" in name)
    threads = {tid for (pid, tid) in names if pid == kernel_pid and tid is not None}
    assert threads and all(names[(kernel_pid, t)].startswith("grid thread") for t in threads)
    slices = [e for e in _slices(trace) if e["pid"] == kernel_pid]
    assert {e["tid"] for e in slices} == threads
    kernels = [e for e in slices if e["name"] == "scoped_kernel[8,2,1]"]
    assert len({e["args"]["launch"] for e in kernels}) == 2
    scopes = [e for e in slices if e["name"] in ("outer", "load", "compute", "store")]
    assert len(scopes) == 2 * 16 * 4
    for scope in scopes:  # inside a kernel slice of the same track (Perfetto nests by time per track)
        assert any(k["tid"] == scope["tid"] and k["ts"] <= scope["ts"]
                   and scope["ts"] + scope["dur"] <= k["ts"] + k["dur"] + 1e-3 for k in kernels)
    programs = [e for e in slices if e["name"].startswith("program (")]
    assert len(programs) == 2 * 16
    counters = trace["otherData"]["counters"]
    assert counters[0]["unit"] == "ticks" and counters[0]["frequency_hz"] > 1e6
    assert counters[0]["counter"] in names[(kernel_pid, None)]


def test_hatchet_tree_builds_a_graphframe(target, instrumentation, tmp_path, capsys):
    _profile(tmp_path / "t.hatchet")
    gf, counters = load_graphframe(str(tmp_path / "t.hatchet"))
    df = gf.dataframe
    assert set(df["name"]) >= {"ROOT", "scoped_kernel", "outer", "load", "compute", "store"}
    kernel = df[df["name"] == "scoped_kernel"].iloc[0]
    assert kernel["count"] == 2 and kernel["programs"] == 32
    assert df[df["name"] == "outer"].iloc[0]["count"] == 32
    assert "ticks at" in counters and ("GHz" in counters or "MHz" in counters)
    assert viewer_main([str(tmp_path / "t.hatchet")]) == 0
    out = capsys.readouterr().out
    assert "count" in out and "total" in out and "mean" in out and "share" in out
    rows = {}  # scope name → (count, indentation): columns count, total, mean, share, then the tree
    for line in out.splitlines()[2:]:
        label = line[46:]
        rows[label.split()[0]] = (line.split()[0], len(label) - len(label.lstrip(" ")))
    assert rows["outer"][0] == "32" and rows["scoped_kernel"][0] == "2"
    assert rows["load"][1] > rows["outer"][1] > rows["scoped_kernel"][1]


def test_outputs_are_honest_about_qemu(instrumentation, tmp_path, capsys):
    import triton
    from spine.driver import CPUDriver
    triton.runtime.driver.set_active(CPUDriver(target="riscv64"))
    try:
        _profile(tmp_path / "q.json")
        _profile(tmp_path / "q.hatchet")
        _profile(None)
    finally:
        triton.runtime.driver.set_active(CPUDriver())
    trace = (tmp_path / "q.json").read_text()
    tree = (tmp_path / "q.hatchet").read_text()
    table = capsys.readouterr().out
    for text in (trace, tree, table):
        assert "rdtime" in text and "QEMU user mode" in text and "host" in text
        assert "not RISC-V timer ticks or cycles" in text
        assert "(cyc)" not in text and "cycles\"" not in text
