"""Two written arguments over one memory through different storages (torch.frombuffer over a bytearray and
over a memoryview of it): each stores where the other does not, so the memory must hold both stores, as
it does natively. Under QEMU the arguments are copied into the arena and back; the copy of the storage
that spans the other's bytes must not put back stale bytes over what the kernel stored through the other."""
import pytest
import torch
import triton
import triton.language as tl

ONES_AT = 0      # element offsets of the two tensors in the buffer
TWOS_AT = 4      # 16 bytes in: memoryview(buf)[16:]


@triton.jit
def ones_then_twos_kernel(ones_ptr, twos_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(ones_ptr + offs, tl.full((BLOCK,), 1.0, tl.float32))
    tl.store(twos_ptr + offs, tl.full((BLOCK,), 2.0, tl.float32))


@pytest.fixture(params=["fast path", "Python launcher"])
def launch_path(request):
    """The fast path (cpp/launch.cpp) takes every launch while no launch hook is set; a hook sends the
    launch through the Python launcher."""
    hook = triton.knobs.runtime.launch_enter_hook
    seen = []
    if request.param == "Python launcher":
        hook.add(seen.append)
    yield seen
    if request.param == "Python launcher":
        hook.remove(seen.append)
        assert seen, "the launch did not go through the Python launcher"


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


def test_views_of_one_storage_over_the_same_bytes(target, launch_path):
    """The same layout through views of one storage: copied as one span, it already works; the two
    storages above must behave the same."""
    buf = torch.zeros(8, dtype=torch.float32)
    ones_then_twos_kernel[(1,)](buf[4:], buf, BLOCK=4)
    assert buf.tolist() == [2.0] * 4 + [1.0] * 4
