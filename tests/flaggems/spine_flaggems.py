"""A pytest plugin for FlagGems' own accuracy suite (../shared/conformance/flaggems-5.3.4/tests, used in
place) on Spine: `tests/flaggems/run.sh` runs it, as `-p spine_flaggems` (FlagGems has a `tests` package of
its own, so this one is imported by its file name). FlagGems' conftest activates Spine's driver itself
(GEMS_VENDOR=spacemit imports spine-triton's CPUDriver, which Spine serves), for the target SPINE_TARGET
names.

    --sample-per-file K --sample-seed S   keeps a seeded random K cases of each test file
    --results PATH                        appends one JSON line per case as it finishes (file, test, outcome,
                                          seconds, the first line of the failure; for a failure, how many
                                          Triton kernel calls the case made and the innermost frame of
                                          Triton or Spine its traceback holds, if any), for summary.py
    --eager                               the evidence run: `flag_gems.use_gems()` does nothing and any
                                          Triton launch raises, so a case that still fails does so on eager
                                          torch, without FlagGems' kernels or Spine (run.sh reruns each
                                          failure so; summary.py tells the two kinds apart)
"""
from __future__ import annotations

import json
import random
import time
from collections import defaultdict

import pytest


def pytest_addoption(parser):
    group = parser.getgroup("spine flaggems")
    group.addoption("--sample-per-file", action="store", type=int, default=0)
    group.addoption("--sample-seed", action="store", type=int, default=0)
    group.addoption("--results", action="store", default="")
    group.addoption("--eager", action="store_true")


def pytest_collection_modifyitems(session, config, items):
    per_file = config.getoption("--sample-per-file")
    if not per_file:
        return
    rng = random.Random(config.getoption("--sample-seed"))
    by_file = defaultdict(list)
    for item in items:
        by_file[item.location[0]].append(item)
    kept = set()
    for file in sorted(by_file):
        cases = by_file[file]
        kept.update(cases if len(cases) <= per_file else rng.sample(cases, per_file))
    deselected = [item for item in items if item not in kept]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
    items[:] = [item for item in items if item in kept]


class KernelCalls:
    """Counts calls of Triton kernels (JITFunction.run: every compile and launch starts there)."""

    def __init__(self):
        self.count = 0

    def install(self) -> None:
        from triton.runtime.jit import JITFunction
        original = JITFunction.run

        def run(function, *args, **kwargs):
            self.count += 1
            return original(function, *args, **kwargs)
        JITFunction.run = run


def _triton_or_spine_frame(excinfo) -> str:
    """The innermost frame of the failure's traceback in Triton's or Spine's code ("path:line"), or ""."""
    import os

    import triton

    import spine
    roots = tuple(os.path.dirname(module.__file__) + os.sep for module in (triton, spine))
    frames = [f"{entry.path}:{entry.lineno + 1}" for entry in excinfo.traceback if str(entry.path).startswith(roots)]
    return frames[-1] if frames else ""


class ResultLog:
    """Writes each case's outcome to `path` as soon as it is known (a long run can be read while it goes)."""

    def __init__(self, path: str, calls: KernelCalls):
        self.path = path
        self.calls = calls
        self.started: dict = {}
        self.frames: dict = {}

    def pytest_runtest_logstart(self, nodeid, location):
        self.started[nodeid] = time.monotonic()
        self.calls.count = 0

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        if call.excinfo is not None:
            self.frames[item.nodeid] = _triton_or_spine_frame(call.excinfo)
        yield

    def pytest_runtest_logreport(self, report):
        failed_setup = report.when == "setup" and report.outcome != "passed"
        if not (report.when == "call" or failed_setup or (report.when == "teardown" and report.failed)):
            return
        outcome = "xfailed" if hasattr(report, "wasxfail") else report.outcome
        message = ""
        if report.failed or outcome == "skipped":
            crash = getattr(report.longrepr, "reprcrash", None)
            text = (crash.message if crash is not None else str(report.longrepr)).strip()
            message = text.splitlines()[0][:300] if text else ""
        seconds = time.monotonic() - self.started.get(report.nodeid, time.monotonic())
        line = {"file": report.location[0], "test": report.nodeid, "outcome": outcome,
                "seconds": round(seconds, 2), "message": message}
        if report.failed:
            line["kernel_calls"] = self.calls.count
            line["triton_frame"] = self.frames.get(report.nodeid, "")
        with open(self.path, "a") as f:
            f.write(json.dumps(line) + "\n")


class NoKernels(RuntimeError):
    pass


def _refuse_launch(*args, **kwargs):
    raise NoKernels("the eager run launched a Triton kernel")


def _eager_only() -> None:
    import contextlib

    import flag_gems
    import triton
    flag_gems.use_gems = lambda *args, **kwargs: contextlib.nullcontext()
    triton.knobs.runtime.launch_enter_hook = _refuse_launch


def pytest_configure(config):
    if config.getoption("--eager"):
        _eager_only()
    if config.getoption("--results"):
        calls = KernelCalls()
        calls.install()
        config.pluginmanager.register(ResultLog(config.getoption("--results"), calls), "spine-flaggems-results")
