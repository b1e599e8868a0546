"""Compile cache and dumps: cached launches do not recompile; anything that changes output does."""
import os
import re

import torch
import triton

from tests.kernels import add_kernel


def _fresh_jit():
    """A new JIT function over the same source: no in-memory cache, same on-disk cache key."""
    return triton.jit(add_kernel.fn)


def _launch(kernel, n=100):
    x = torch.rand(n)
    out = torch.empty(n)
    kernel[(1,)](x, x, out, n, BLOCK=128)
    torch.testing.assert_close(out, 2 * x)


def test_cached_launch_does_not_recompile(target, fresh_cache, compile_count):
    kernel = _fresh_jit()
    _launch(kernel)
    _launch(kernel)
    assert len(compile_count) == 1
    _launch(_fresh_jit())  # disk cache hit
    assert len(compile_count) == 1


def test_always_compile_recompiles(target, fresh_cache, compile_count, monkeypatch):
    _launch(_fresh_jit())
    monkeypatch.setenv("TRITON_ALWAYS_COMPILE", "1")
    _launch(_fresh_jit())
    assert len(compile_count) == 2


def test_dumps_appear_and_a_changed_switch_recompiles(target, fresh_cache, compile_count, monkeypatch,
                                                      tmp_path):
    kernel = _fresh_jit()
    _launch(kernel)
    assert len(compile_count) == 1
    dump = tmp_path / "dump"
    monkeypatch.setenv("SPINE_TRITON_DUMP_PATH", str(dump))
    _launch(kernel)
    assert len(compile_count) == 2
    for stage in ("ttir", "linalg", "llir", "s", "so"):
        assert (dump / f"add_kernel.{stage}").stat().st_size > 0, stage
    assert "linalg.copy" in (dump / "add_kernel.linalg").read_text()
    if target == "riscv64":
        # RVV loads of 32-bit elements: vle32.v, or whole registers (vl2re32.v) in a loop without a tail
        assert re.search(r"\bvl(e|[1248]re)32\.v\b", (dump / "add_kernel.s").read_text())
    monkeypatch.delenv("SPINE_TRITON_DUMP_PATH")
    _launch(kernel)
    assert len(compile_count) == 2  # back to the first configuration: its kernel is still cached


def test_targets_do_not_share_cache_entries(fresh_cache, compile_count):
    from spine.driver import CPUDriver
    kernel = _fresh_jit()
    for name in ("host", "riscv64", "host"):
        triton.runtime.driver.set_active(CPUDriver(target=name))
        _launch(kernel)
    assert len(compile_count) == 2


def test_cache_writes_leave_no_temporaries(target, fresh_cache):
    _launch(_fresh_jit())
    leftovers = [f for _, _, files in os.walk(fresh_cache) for f in files if ".tmp" in f]
    assert leftovers == []
