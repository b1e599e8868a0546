"""Every numeric test runs on both targets: riscv64 (under QEMU on x86 hosts) and the host."""
import os

import pytest
import torch
import triton

from spine.driver import CPUDriver

TARGETS = ("riscv64", "host")


@pytest.fixture(params=TARGETS)
def target(request, monkeypatch):
    monkeypatch.setenv("SPINE_TARGET", request.param)
    triton.runtime.driver.set_active(CPUDriver(target=request.param))
    return request.param


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    """A private triton kernel cache, so compile counts are observable. Spine's own builds (runtime,
    compiler-rt, symbol memo) stay where they were: rebuilding them is not what these tests are about."""
    from spine.cache import cache_dir
    monkeypatch.setenv("SPINE_CACHE_DIR", cache_dir())
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "cache"))
    os.makedirs(tmp_path / "cache", exist_ok=True)
    return tmp_path / "cache"


@pytest.fixture
def compile_count(monkeypatch):
    """A list that grows by one for each kernel conversion (each real compile)."""
    import spine.compiler.pipeline as pipeline
    calls = []
    real = pipeline.make_linalg

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)
    monkeypatch.setattr(pipeline, "make_linalg", counting)
    return calls
