"""Two written arguments over one memory through different storages (torch.frombuffer over a bytearray and
over a memoryview of it): each stores where the other does not, so the memory must hold both stores, as
it does natively. Under QEMU the arguments are copied into the arena and back; the copy of the storage
that spans the other's bytes must not put back stale bytes over what the kernel stored through the other."""
from dataclasses import dataclass, field

import pytest
import torch
import triton
import triton.language as tl

from spine.driver.launcher import CPULauncher

@triton.jit
def ones_then_twos_kernel(ones_ptr, twos_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(ones_ptr + offs, tl.full((BLOCK,), 1.0, tl.float32))
    tl.store(twos_ptr + offs, tl.full((BLOCK,), 2.0, tl.float32))


@dataclass
class LaunchPath:
    python: bool                    # a launch hook set: every launch goes through the Python launcher
    calls: list = field(default_factory=list)

    def check(self) -> None:
        """The launches took the path this test is about (the fast path hands some launches back)."""
        assert bool(self.calls) == self.python, f"{len(self.calls)} launches through the Python launcher"


def _ignore(metadata):
    pass


@pytest.fixture(params=["fast path", "Python launcher"])
def launch_path(request, monkeypatch):
    path = LaunchPath(request.param == "Python launcher")
    real = CPULauncher.__call__

    def counting(self, *args, **kwargs):
        path.calls.append(1)
        return real(self, *args, **kwargs)
    monkeypatch.setattr(CPULauncher, "__call__", counting)
    hook = triton.knobs.runtime.launch_enter_hook
    if path.python:
        hook.add(_ignore)
    try:
        yield path
    finally:
        if path.python:
            hook.remove(_ignore)


def _buffer_over(buf: bytearray):
    whole = torch.frombuffer(buf, dtype=torch.float32)                     # all 8 elements
    tail = torch.frombuffer(memoryview(buf)[16:], dtype=torch.float32)     # elements 4..7, another storage
    assert whole.untyped_storage().data_ptr() != tail.untyped_storage().data_ptr()
    return whole, tail


@pytest.mark.parametrize("whole_first", [True, False], ids=["whole storage first", "whole storage second"])
def test_outputs_over_one_bytearray_through_two_storages(target, launch_path, whole_first):
    buf = bytearray(32)
    whole, tail = _buffer_over(buf)
    if whole_first:
        ones_then_twos_kernel[(1,)](whole, tail, BLOCK=4)          # whole[0:4] = 1, tail[0:4] = 2
        expected = [1.0] * 4 + [2.0] * 4
    else:
        ones_then_twos_kernel[(1,)](tail, whole, BLOCK=4)          # tail[0:4] = 1, whole[0:4] = 2
        expected = [2.0] * 4 + [1.0] * 4
    assert torch.frombuffer(buf, dtype=torch.float32).tolist() == expected
    launch_path.check()


def test_views_of_one_storage_over_the_same_bytes(target, launch_path):
    """The same layout through views of one storage: copied as one span, it already works; the two
    storages above must behave the same."""
    buf = torch.zeros(8, dtype=torch.float32)
    ones_then_twos_kernel[(1,)](buf[4:], buf, BLOCK=4)
    assert buf.tolist() == [2.0] * 4 + [1.0] * 4
    launch_path.check()
