"""triton-cpu's `triton.testing.do_bench` keyword on stock triton: code written for that fork times its kernels
with `do_bench(fn, ..., measure_time_with_hooks=True)`, which counts only the time inside kernel launches (as
triton's launch hooks see it) rather than the whole of `fn`. The import of triton.testing is followed by
`install` (spine/aliases.py), which gives its do_bench that keyword where it has none of its own:

    do_bench(fn, warmup=25, rep=100, grad_to_none=None, quantiles=None, return_mode="mean",
             measure_time_with_hooks=False)

With the keyword true, stock triton's own do_bench runs inside the active driver's hook timing
(spine/driver/device_interface.py): its events, and so its estimate of how often to run `fn` and the times
it returns, then count launches only. A driver without hook timing (a GPU's) is a clear error rather than
a silently different measurement."""
from __future__ import annotations

import functools
import inspect
import sys

KEYWORD = "measure_time_with_hooks"


def _with_hook_timing(do_bench):
    @functools.wraps(do_bench)
    def timed(fn, *args, measure_time_with_hooks: bool = False, **kwargs):
        if not measure_time_with_hooks:
            return do_bench(fn, *args, **kwargs)
        from triton.runtime import driver
        interface = driver.active.get_device_interface()
        if not hasattr(interface, "hook_timing"):
            raise RuntimeError(f"do_bench({KEYWORD}=True) needs Spine's CPU driver to be the active one "
                               "(triton.runtime.driver.set_active_to_cpu()): the active driver cannot time "
                               "launches by their hooks")
        with interface.hook_timing():
            return do_bench(fn, *args, **kwargs)
    timed.__wrapped_by_spine__ = True
    return timed


def install() -> None:
    """Gives triton.testing.do_bench the keyword, where it has none of its own."""
    testing = sys.modules.get("triton.testing")
    if testing is None or getattr(testing.do_bench, "__wrapped_by_spine__", False):
        return
    if KEYWORD in inspect.signature(testing.do_bench).parameters:   # triton-cpu's own
        return
    testing.do_bench = _with_hook_timing(testing.do_bench)
