"""Proton on the CPU: profiling Spine kernels with triton's and spine-triton's profiler APIs.

Inside kernels, `triton.profiler.language.enter_scope/exit_scope` (instrumentation on) become calls
that read the target's counter into per-thread buffers of the C runtime (to_linalg/proton_record.py,
cpp/profile_buffers.c). Around kernels, sessions record each launch and the host scopes around it.

    records.py       the data: counters, launches, intervals, host spans
    buffers.py       the runtime's side: profiled launches and the blocks they return
    listeners.py     Session (what one listener keeps) and the list of listeners
    session.py       launches and host scopes handed to the listeners
    cpu_profiler.py  spine-triton's API (`profiler.profile()`, start/stop/reset/dump/get_results)
    triton_api.py    triton's API (`proton.start(name, backend="cpu")`, `proton.scope`, `finalize`)
    capture.py       PROTON_KERNEL_CAPTURE=1: every launch, written at exit
    output.py        PROTON_OUTPUT's formats: trace.py (Chrome trace), tree.py (hatchet), table.py
    viewer.py        `python -m spine.proton.viewer FILE`

Each module imports only those below it: records <- listeners <- tree <- trace, table <- output
<- capture <- session <- cpu_profiler, triton_api (buffers stands on records, viewer on tree), so the
writers never reach the code that feeds them.

`triton.backends.spine_triton.proton` is this package (spine/aliases.py).
"""
from .cpu_profiler import (CPUProfiler, dump, get_results, is_available, profile, profiler, reset,  # noqa: F401
                           start, stop)
