"""Native compile stages run in worker processes: a crash there never reaches the caller."""
import threading
import warnings

import pytest
import torch
import triton

from spine.compiler.compile_worker import NativeCrash, StageTimeout, pool
from spine.errors import SpineCompilationError
from spine.kernel_facts import KernelFacts
from tests.cpu_features import host_runs
from tests.kernels import add_kernel, softmax_kernel


def test_an_abort_in_a_worker_is_an_exception_and_the_pool_recovers():
    with pytest.raises(NativeCrash, match=r"(?s)killed by SIGABRT.*selftest: aborting"):
        pool().run("selftest", action="abort")
    with pytest.raises(NativeCrash, match="exit status 3"):
        pool().run("selftest", action="exit:3")
    assert pool().run("selftest", action="pid") > 0


def test_workers_are_reused():
    first = pool().run("selftest", action="pid")
    assert pool().run("selftest", action="pid") == first


def test_a_stage_that_never_ends_is_stopped(monkeypatch):
    monkeypatch.setenv("SPINE_COMPILE_TIMEOUT", "0.5")
    with pytest.raises(StageTimeout, match="within 0 s|within 1 s"):
        pool().run("selftest", action="sleep:30")
    assert pool().run("selftest", action="pid") > 0


def test_llvm_crash_falls_back_to_a_generic_cpu(fresh_cache, monkeypatch):
    """LLVM's codegen for one CPU dies (LLVM 22's loop vectoriser asserted "VPlan cost model and legacy
    cost model disagreed" on a softmax's reduction tuned for znver4): the compile retries for the same
    instruction set without the tuning, warns, and the kernel works."""
    from spine.compiler import pipeline
    from spine.driver import CPUDriver
    real_pool = pipeline.pool()

    class ZnverCrashes:
        def __getattr__(self, name):
            return getattr(real_pool, name)

        @staticmethod
        def run(stage, **kwargs):
            if stage == "optimize" and kwargs["cpu"] == "znver4":
                raise NativeCrash(stage, "killed by SIGABRT\nVPlan cost model and legacy cost model disagreed")
            return real_pool.run(stage, **kwargs)
    monkeypatch.setattr(pipeline, "pool", lambda: ZnverCrashes())
    monkeypatch.setenv("SPINE_HOST_CPU", "znver4")
    triton.runtime.driver.set_active(CPUDriver(target="host"))
    x = torch.randn(17, 100) * 3
    out = torch.empty_like(x)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = softmax_kernel.warmup(out, x, x.stride(0), out.stride(0), 100, BLOCK=128, grid=(17,))
    assert KernelFacts.from_metadata(compiled.metadata).codegen == "cpu=x86-64-v4"
    assert any("VPlan cost model" in str(w.message) and "x86-64-v4" in str(w.message) for w in caught)
    if host_runs("x86-64-v4"):
        softmax_kernel[(17,)](out, x, x.stride(0), out.stride(0), 100, BLOCK=128)
        torch.testing.assert_close(out, torch.softmax(x, dim=1), rtol=1e-5, atol=1e-6)


def test_a_crash_in_every_configuration_is_a_compilation_error(monkeypatch):
    from spine.compiler import pipeline

    def always_crash(stage, **kwargs):
        raise NativeCrash(stage, "killed by SIGABRT\nLLVM ERROR: simulated")

    class FakePool:
        run = staticmethod(always_crash)
    monkeypatch.setattr(pipeline, "pool", lambda: FakePool())
    options = type("Options", (), {"triple": "x86_64-unknown-linux-gnu", "cpu": "znver4", "features": "",
                                   "dump_path": "", "dump_passes": ""})()
    with pytest.raises(SpineCompilationError, match=r"(?s)kernel 'k'.*cpu=znver4.*x86-64-v4.*vectoriser off"):
        pipeline.codegen_with_fallbacks("k", "", "", options)


def test_kernels_compile_in_parallel_from_several_threads(target, fresh_cache):
    results, errors = {}, []

    def compile_and_run(block):
        try:
            x = torch.rand(1000)
            out = torch.empty(1000)
            triton.jit(add_kernel.fn)[(triton.cdiv(1000, block),)](x, x, out, 1000, BLOCK=block)
            results[block] = torch.equal(out, x + x)
        except Exception as err:  # noqa: BLE001
            errors.append(err)
    threads = [threading.Thread(target=compile_and_run, args=(block,)) for block in (64, 128, 256, 512)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert results == {64: True, 128: True, 256: True, 512: True}


def _interrupt_after(seconds: float):
    """Raises KeyboardInterrupt in this (main) thread after `seconds`, as Ctrl-C does."""
    import signal

    def interrupt(signum, frame):
        raise KeyboardInterrupt
    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    return lambda: (signal.setitimer(signal.ITIMER_REAL, 0), signal.signal(signal.SIGALRM, previous))


def test_a_worker_interrupted_in_its_wait_never_answers_the_next_request():
    """Ctrl-C while a stage runs: the worker still owes that stage's reply. Handed back to the pool, it
    would answer the next request with it (another kernel's object, linked and cached under the wrong key).
    The pool closes it instead, and the next request gets its own answer."""
    pool().run("selftest", action="pid")  # one warm worker
    restore = _interrupt_after(0.3)
    try:
        with pytest.raises(KeyboardInterrupt):
            pool().run("selftest", action="sleep:1")
    finally:
        restore()
    # The interrupted call's reply (None, from the sleep) must not be taken for this one's (the pid).
    answer = pool().run("selftest", action="pid")
    assert isinstance(answer, int) and answer > 0


def test_a_reply_to_another_request_is_refused():
    """The worker echoes each request's serial: a reply that carries another one is never returned."""
    from spine.compiler.compile_worker import CompileWorker, WorkerOutOfStep
    worker = CompileWorker()
    try:
        worker.serial = 41   # the worker answers 42; the caller then asks as if it were request 43
        real_read = worker._read_reply

        def stale_reply(stage, timeout):
            serial, status, value = real_read(stage, timeout)
            return serial - 1, status, value
        worker._read_reply = stale_reply
        with pytest.raises(WorkerOutOfStep, match="answered request 41 for request 42"):
            worker.call("selftest", {"action": "pid"}, None)
        assert not worker.alive()
    finally:
        worker.close()


@pytest.mark.parametrize("value", ["-1", "nan", "soon"])
def test_a_compile_timeout_that_is_not_a_number_of_seconds_is_an_error(monkeypatch, value):
    monkeypatch.setenv("SPINE_COMPILE_TIMEOUT", value)
    with pytest.raises(ValueError, match="SPINE_COMPILE_TIMEOUT"):
        pool().run("selftest", action="pid")


@pytest.mark.parametrize("value", ["inf", "1e300", "0"])
def test_a_compile_timeout_of_never_runs_without_one(monkeypatch, value):
    monkeypatch.setenv("SPINE_COMPILE_TIMEOUT", value)
    assert pool().run("selftest", action="pid") > 0


def _pool_code():
    """The code objects whose every line an interrupt may land on: the pool's bookkeeping."""
    from spine.compiler.compile_worker import CompileWorkerPool, _Claim
    methods = [CompileWorkerPool.run, CompileWorkerPool._take, CompileWorkerPool._give_back,
               CompileWorkerPool.prestart, _Claim.__init__]
    return {method.__code__ for method in methods}


def _interrupt_at_check(number: int, code: set):
    """A trace function that raises KeyboardInterrupt once, at the `number`-th point in `code` where
    CPython runs a pending signal's handler: a function's start, the end of a call, a backward jump.
    (Raising at every line would also raise where no signal can land, such as between a `with` body and
    its `__exit__`.) Returns it and a list that says whether it fired."""
    import dis
    import sys
    seen, fired, previous = [0], [], {}
    # Per code object: the offset after each call (a call that returns normally runs the check there)
    # and the offsets of the backward jumps (the check runs when one is taken).
    resumes, jumps = {}, {}
    for each in code:
        instructions = list(dis.get_instructions(each))
        resumes[each] = {ins.offset: nxt.offset for ins, nxt in zip(instructions, instructions[1:])
                         if ins.opname in ("CALL", "CALL_FUNCTION_EX")}
        jumps[each] = {ins.offset for ins in instructions if "JUMP_BACKWARD" in ins.opname
                       and ins.opname != "JUMP_BACKWARD_NO_INTERRUPT"}

    def check():
        seen[0] += 1
        if seen[0] == number:
            fired.append(True)
            raise KeyboardInterrupt

    def local(frame, event, arg):
        if event == "opcode" and not fired:
            offset = frame.f_lasti
            last = previous.get(id(frame))   # by id: holding the frame would keep the pool's claim alive
            previous[id(frame)] = offset
            if last is not None and (resumes[frame.f_code].get(last) == offset
                                     or (last in jumps[frame.f_code] and offset < last)):
                check()
        elif event == "return":
            previous.pop(id(frame), None)
        return local

    def tracer(frame, event, arg):
        if frame.f_code not in code or fired:
            return None
        frame.f_trace_opcodes, frame.f_trace_lines = True, False
        check()
        return local
    return tracer, fired, sys


def _completes(pool, seconds: float = 60.0):
    """Runs one request on another thread: True when it answered, False when it still waits."""
    answer = []
    thread = threading.Thread(target=lambda: answer.append(pool.run("selftest", action="pid")), daemon=True)
    thread.start()
    thread.join(seconds)
    return bool(answer) and answer[0] > 0


@pytest.mark.parametrize("start", ["idle", "none", "dead", "prestart", "crash"])
def test_ctrl_c_anywhere_in_the_pool_loses_no_place(start):
    """Ctrl-C anywhere in taking and giving back a worker: afterwards the pool counts exactly its idle
    workers, and a pool of one still serves (a lost place would make the next compile wait forever).
    Interrupts at every point of the pool's own code where a signal's handler can run, in turn, for each
    way a request can begin and end."""
    import gc
    from spine.compiler.compile_worker import CompileWorkerPool
    code = _pool_code()
    number = 0
    while True:
        number += 1
        workers = CompileWorkerPool(1)
        try:
            if start in ("idle", "dead"):
                workers.run("selftest", action="pid")
            if start == "dead":
                workers.idle[0].proc.kill()
                workers.idle[0].proc.wait()
            tracer, fired, sys = _interrupt_at_check(number, code)
            sys.settrace(tracer)
            try:
                if start == "prestart":
                    workers.prestart()
                else:
                    workers.run("selftest", action="exit:3" if start == "crash" else "pid")
            except (KeyboardInterrupt, NativeCrash):
                pass
            finally:
                sys.settrace(None)
            gc.collect()
            assert workers.count == len(workers.idle) <= 1, (start, number)
            assert _completes(workers), (start, number)
            assert workers.count == len(workers.idle) == 1, (start, number)
        finally:
            workers.shutdown()
        if not fired:
            break
    assert number > 10   # the trace reached the pool's code
