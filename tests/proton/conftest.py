"""Fixtures for the profiler's tests: triton's instrumentation flag, and a profiler left as it was found."""
import pytest


@pytest.fixture
def instrumentation():
    """Kernels compiled now carry their proton scopes (spine-triton's documented set-up)."""
    import triton.profiler.language as pl
    from triton.profiler.flags import flags
    pl.enable_semantic("triton")
    flags.instrumentation_on = True
    yield
    flags.instrumentation_on = False


@pytest.fixture(autouse=True)
def quiet_profiler(monkeypatch):
    """No test sees another's launches; outputs go where a test says, not to a stray PROTON_OUTPUT."""
    from spine.proton import profiler
    for name in ("PROTON_OUTPUT", "PROTON_KERNEL_CAPTURE", "PROTON_VERBOSE", "TRITON_DISABLE_PROTON"):
        monkeypatch.delenv(name, raising=False)
    profiler.stop()
    profiler.reset()
    yield profiler
    profiler.stop()
    profiler.reset()
    from spine.proton import capture
    if capture._session is not None:  # nothing of a test's capture is written when pytest exits
        capture._session.reset()
