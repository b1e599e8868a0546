"""Launch graphs (spine/driver/graph.py): launches recorded while they run, replayed on the tensors' values
at replay time, on both targets; only the capturing thread's launches; errors raised as a launch's."""
import threading

import pytest
import torch
import triton
import triton.language as tl

from spine.driver.graph import LaunchGraph
from spine.errors import DeviceAssertionError


@triton.jit
def axpy_kernel(x_ptr, y_ptr, out_ptr, a, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, a * tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.jit
def shift_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """out[i] = x[i + 1]: with out = x[:-1] and x overlapping it, the alias-safe variant runs."""
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + 1 + offs, mask=mask), mask=mask)


@triton.jit
def assert_positive_kernel(x_ptr):
    tl.device_assert(tl.load(x_ptr) > 0, "x must be positive")


def test_replay_reads_the_tensors_now(target):
    n = 37  # not a multiple of the block
    x, y, mid, out = torch.randn(n), torch.randn(n), torch.empty(n), torch.empty(n)
    graph = LaunchGraph()
    with graph.capture():
        axpy_kernel[(triton.cdiv(n, 16),)](x, y, mid, 2.0, n, BLOCK=16)
        axpy_kernel[(triton.cdiv(n, 16),)](mid, x, out, -0.5, n, BLOCK=16)
    assert len(graph) == 2
    torch.testing.assert_close(out, -0.5 * (2 * x + y) + x)   # the capture ran them
    for _ in range(3):
        x.copy_(torch.randn(n))
        y.copy_(torch.randn(n))
        out.zero_()
        graph.replay()
        torch.testing.assert_close(mid, 2 * x + y)
        torch.testing.assert_close(out, -0.5 * (2 * x + y) + x)


def test_replay_of_an_alias_safe_launch(target):
    x = torch.arange(10, dtype=torch.float32)
    graph = LaunchGraph()
    with graph.capture():
        shift_kernel[(1,)](x, x[:-1], 9, BLOCK=16)
    assert x.tolist() == [float(i) for i in range(1, 10)] + [9.0]
    graph.replay()
    assert x.tolist() == [float(i) for i in range(2, 10)] + [9.0, 9.0]


def test_only_the_capturing_threads_launches(target):
    n = 8
    x, y = torch.ones(n), torch.ones(n)
    mine, theirs = torch.empty(n), torch.empty(n)
    axpy_kernel[(1,)](x, y, theirs, 1.0, n, BLOCK=16)  # compiled before the thread runs
    graph = LaunchGraph()
    with graph.capture():
        other = threading.Thread(target=lambda: axpy_kernel[(1,)](x, y, theirs, 3.0, n, BLOCK=16))
        other.start()
        other.join()
        axpy_kernel[(1,)](x, y, mine, 1.0, n, BLOCK=16)
    assert len(graph) == 1 and theirs.tolist() == [4.0] * n
    theirs.zero_()
    graph.replay()
    assert mine.tolist() == [2.0] * n and theirs.tolist() == [0.0] * n


def test_a_failed_assertion_in_a_replay_raises(target):
    x = torch.ones(1)
    graph = LaunchGraph()
    with graph.capture():
        assert_positive_kernel[(1,)](x, debug=True)
    graph.replay()
    x.fill_(-1.0)
    with pytest.raises(DeviceAssertionError, match="x must be positive"):
        graph.replay()
    x.fill_(1.0)
    graph.replay()


def test_launches_after_a_failing_one_do_not_run(target):
    """On the host a replay runs its launches in one call into the runtime: it stops at the first that
    fails, as launching them one by one would, and raises that launch's error."""
    n = 8
    x, y, mid, out = torch.ones(n), torch.ones(n), torch.empty(n), torch.empty(n)
    graph = LaunchGraph()
    with graph.capture():
        axpy_kernel[(1,)](x, y, mid, 1.0, n, BLOCK=16)
        assert_positive_kernel[(1,)](x, debug=True)
        axpy_kernel[(1,)](mid, y, out, 1.0, n, BLOCK=16)
    assert len(graph) == 3 and out.tolist() == [3.0] * n
    x.fill_(-1.0)
    out.zero_()
    with pytest.raises(DeviceAssertionError, match="x must be positive"):
        graph.replay()
    assert mid.tolist() == [0.0] * n and out.tolist() == [0.0] * n   # the first ran, the last did not
    x.fill_(2.0)
    graph.replay()
    assert mid.tolist() == [3.0] * n and out.tolist() == [4.0] * n


def test_misuse_is_a_clear_error(target):
    graph = LaunchGraph()
    x = torch.ones(4)
    with pytest.raises(ZeroDivisionError):
        with graph.capture():
            axpy_kernel[(1,)](x, x, torch.empty(4), 1.0, 4, BLOCK=16)
            1 / 0
    assert len(graph) == 0   # a capture that failed keeps nothing
    with graph.capture():
        with pytest.raises(RuntimeError, match="already capturing"):
            with graph.capture():
                pass
        with pytest.raises(RuntimeError, match="while it captures"):
            graph.replay()
    graph.replay()  # empty: nothing to run
