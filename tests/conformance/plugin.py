"""A pytest plugin that runs Triton's own language tests (../shared/conformance/triton-language-tests,
used in place) on Spine: it activates the CPU driver for the chosen target, supplies the fixtures and
helpers those tests expect from the triton-cpu fork's conftest and `triton._internal_testing`, and keeps,
in test_core.py, the cases that fork marks as runnable on a CPU.

    pytest -p tests.conformance.plugin --spine-target host ../shared/conformance/triton-language-tests

`--sample N --sample-seed S` keeps a seeded random N of the selected cases (the slice `make test` runs).
Cases listed in known_failures.py are marked xfail with their cause. Tests listed in cpu_branches.py run
the branch other backends take where their CPU branch describes the triton-cpu fork's backend.
"""
from __future__ import annotations

import os
import random
import sys
import tempfile

import pytest

from tests.conformance.cpu_branches import AS_OTHER_BACKENDS
from tests.conformance.known_failures import known_failure

# Files whose every test a CPU backend may run (test_core.py marks its CPU tests; these files do not).
UNMARKED_FILES = ("test_block_pointer.py", "test_conversions.py", "test_libdevice.py", "test_random.py",
                  "test_standard.py", "test_tensor_descriptor.py", "test_tuple.py")


def pytest_addoption(parser):
    group = parser.getgroup("spine conformance")
    group.addoption("--device", action="store", default="cpu")
    group.addoption("--spine-target", action="store", default=os.environ.get("SPINE_TARGET", "host"),
                    help="riscv64 or host")
    group.addoption("--sample", action="store", type=int, default=0, help="keep a random N of the cases")
    group.addoption("--sample-seed", action="store", type=int, default=0)


def pytest_configure(config):
    config.addinivalue_line("markers", "interpreter: the interpreter supports the test")
    config.addinivalue_line("markers", "cpu: the test is supported on a CPU")
    target = config.getoption("--spine-target")
    os.environ["SPINE_TARGET"] = target
    _add_missing_helpers()
    import triton
    from spine.driver import CPUDriver
    triton.runtime.driver.set_active(CPUDriver(target=target))


def _add_missing_helpers() -> None:
    """Helpers the triton-cpu fork added to triton._internal_testing, absent from the stock wheel."""
    import triton._internal_testing as testing

    def backend_is(name):
        target = testing.get_current_target()
        return target is not None and target.backend == name

    def hip_arch_in(*archs):
        target = testing.get_current_target()
        return target is not None and target.backend == "hip" and target.arch in archs

    testing.is_cpu = lambda: backend_is("cpu")
    testing.is_hip_rdna3 = getattr(testing, "is_hip_rdna3", lambda: hip_arch_in("gfx1100", "gfx1101", "gfx1102"))
    testing.is_hip_rdna4 = getattr(testing, "is_hip_rdna4", lambda: hip_arch_in("gfx1200", "gfx1201"))


def pytest_collection_modifyitems(session, config, items):
    kept = [item for item in items if _runs_on_cpu(item)]
    sample = config.getoption("--sample")
    if sample and sample < len(kept):
        kept = sorted(random.Random(config.getoption("--sample-seed")).sample(kept, sample),
                      key=lambda item: item.nodeid)
    deselected = [item for item in items if item not in set(kept)]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
    target = config.getoption("--spine-target")
    for item in kept:
        entry = known_failure(_test_id(item), target)
        if entry is not None:
            item.add_marker(pytest.mark.xfail(strict=False, reason=f"[{entry.group}] {entry.cause}"))
    items[:] = kept


def _test_id(item) -> str:
    """"<file>::<test name and parameters>", what known_failures.py patterns match."""
    return f"{os.path.basename(str(item.fspath))}::{item.nodeid.split('::', 1)[-1]}"


def _runs_on_cpu(item) -> bool:
    return item.get_closest_marker("cpu") is not None or os.path.basename(str(item.fspath)) in UNMARKED_FILES


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    helpers = AS_OTHER_BACKENDS.get(getattr(item, "originalname", item.name), ({}, ""))[0]
    replaced = []
    suite = os.path.dirname(str(item.fspath))
    for module in list(sys.modules.values()):
        if os.path.dirname(getattr(module, "__file__", None) or "") != suite:
            continue
        for name, value in helpers.items():
            if hasattr(module, name):
                replaced.append((module, name, getattr(module, name)))
                setattr(module, name, lambda value=value: value)
    try:
        yield
    finally:
        for module, name, original in replaced:
            setattr(module, name, original)


@pytest.fixture
def device(request):
    return request.config.getoption("--device")


@pytest.fixture
def fresh_triton_cache():
    from triton import knobs
    with tempfile.TemporaryDirectory() as directory, knobs.cache.scope(), knobs.runtime.scope():
        knobs.cache.dir = directory
        yield directory


@pytest.fixture
def fresh_knobs():
    from triton._internal_testing import _fresh_knobs_impl
    fresh, reset = _fresh_knobs_impl(skipped_attr={"build", "nvidia", "amd"})
    try:
        yield fresh()
    finally:
        reset()


@pytest.fixture
def with_allocator():
    import triton
    from triton._internal_testing import default_alloc_fn
    from triton.runtime._allocation import NullAllocator
    triton.set_allocator(default_alloc_fn)
    try:
        yield
    finally:
        triton.set_allocator(NullAllocator())
