"""Loads from arguments a kernel never writes read memory in place; when such an argument overlaps
memory the kernel writes, the launcher switches to the variant that copies every tile first, so a
program still sees the values from before its own stores."""
import torch
import triton
import triton.language as tl



@triton.jit
def shift_right_kernel(x_ptr, out_ptr, n, shift, BLOCK: tl.constexpr):
    # Reads element i-shift and writes element i: an in-place update is only right if the whole tile
    # was read before the store.
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs - shift, mask=(offs >= shift) & (offs - shift < n), other=0.0)
    y = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr + offs, x * 10 + y, mask=offs < n)


def test_in_place_update_through_an_aliasing_argument(target, fresh_cache, compile_count):
    compiles = compile_count
    kernel = triton.jit(shift_right_kernel.fn)
    x = torch.arange(64, dtype=torch.float32)
    expected = torch.cat([torch.zeros(2), x[:-2]]) * 10 + x
    kernel[(1,)](x, x, 64, 2, BLOCK=64)          # out is x itself
    torch.testing.assert_close(x, expected)
    assert len(compiles) == 2                  # the in-place variant, then the copying one


def test_distinct_arguments_keep_the_in_place_variant(target, fresh_cache, compile_count):
    compiles = compile_count
    kernel = triton.jit(shift_right_kernel.fn)
    x = torch.arange(64, dtype=torch.float32)
    out = torch.empty(64)
    kernel[(1,)](x, out, 64, 2, BLOCK=64)
    kernel[(1,)](x[:32], out[32:], 32, 2, BLOCK=64)   # same storage for neither pair of arguments
    assert len(compiles) == 1
    torch.testing.assert_close(out[32:], torch.cat([torch.zeros(2), x[:30]]) * 10 + x[:32])


def test_views_of_one_storage_that_do_not_overlap(target, fresh_cache, compile_count):
    compiles = compile_count
    kernel = triton.jit(shift_right_kernel.fn)
    buffer = torch.arange(128, dtype=torch.float32)
    source, destination = buffer[:64], buffer[64:]
    kernel[(1,)](source, destination, 64, 2, BLOCK=64)
    assert len(compiles) == 1
    torch.testing.assert_close(destination, torch.cat([torch.zeros(2), source[:-2]]) * 10 + source)


def _launches_compile(compiles, pairs) -> list:
    """How many variants one kernel has compiled after each launch on (source, destination)."""
    kernel, counts = triton.jit(shift_right_kernel.fn), []
    for source, destination in pairs:
        kernel[(1,)](source, destination, 64, 2, BLOCK=64)
        counts.append(len(compiles))
    return counts


def test_one_element_in_common_is_an_overlap(target, fresh_cache, compile_count):
    """The launcher's byte ranges end exactly at a view's last element, taken from a contiguous view's
    nbytes: adjacent views keep the in-place variant, one element in common takes the copying one."""
    buffer = torch.arange(256, dtype=torch.float32)
    assert _launches_compile(compile_count, [(buffer[:64], buffer[64:128]), (buffer[:65], buffer[64:128])]) == [1, 2]


def test_one_element_in_common_with_a_strided_view(target, fresh_cache, compile_count):
    """The same for a strided view, whose range comes from its shape and strides."""
    buffer = torch.arange(256, dtype=torch.float32)
    pairs = [(buffer[:127:2], buffer[128:192]), (buffer[:129:2], buffer[128:192])]
    assert _launches_compile(compile_count, pairs) == [1, 2]


def test_a_contiguous_view_with_a_wide_stride_of_size_one(target, fresh_cache, compile_count):
    """torch calls a view contiguous whatever the stride of a dimension of size 1, which reaches nothing."""
    buffer = torch.arange(256, dtype=torch.float32)
    source = buffer.as_strided((1, 64), (1000, 1))
    assert source.is_contiguous()
    assert _launches_compile(compile_count, [(source, buffer[64:128])]) == [1]
    torch.testing.assert_close(buffer[64:128], torch.cat([torch.zeros(2), buffer[:62]]) * 10 + buffer[:64])


@triton.jit
def reverse_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + (BLOCK - 1 - offs)))


def test_in_place_reverse(target, fresh_cache):
    # Unmasked, full tile, read through a negative stride: read in place, the second half of the store
    # would see the first half's writes.
    x = torch.arange(64, dtype=torch.float32)
    triton.jit(reverse_kernel.fn)[(1,)](x, x, BLOCK=64)
    torch.testing.assert_close(x, torch.arange(63, -1, -1, dtype=torch.float32))


class Address:
    """An address alone, as triton takes a pointer (data_ptr and dtype, no device, no storage): FlagGems'
    TypedPtr."""

    def __init__(self, tensor, offset=0):
        self.ptr, self.dtype = tensor.data_ptr() + offset * tensor.element_size(), tensor.dtype

    def data_ptr(self):
        return self.ptr

    def untyped_storage(self):
        return self


def test_an_address_alone_is_taken_as_overlapping_everything(fresh_cache, compile_count, monkeypatch):
    """On the host an address is passed as it is; its extent is unknown, so the launch takes the copying
    variant, and an in-place update through it is right."""
    from spine.driver import CPUDriver
    monkeypatch.setenv("SPINE_TARGET", "host")
    triton.runtime.driver.set_active(CPUDriver(target="host"))
    kernel = triton.jit(shift_right_kernel.fn)
    x = torch.arange(64, dtype=torch.float32)
    expected = torch.cat([torch.zeros(2), x[:-2]]) * 10 + x
    kernel[(1,)](x, Address(x), 64, 2, BLOCK=64)
    torch.testing.assert_close(x, expected)
    assert len(compile_count) == 2
    out = torch.empty(64)
    kernel[(1,)](Address(x), out, 64, 0, BLOCK=64)
    torch.testing.assert_close(out, x * 11)


def test_an_address_alone_is_refused_under_qemu(monkeypatch):
    """Under QEMU the kernel works on copies of its arguments' memory: an address has no extent to copy."""
    import pytest
    from spine.driver import CPUDriver
    monkeypatch.setenv("SPINE_TARGET", "riscv64")
    triton.runtime.driver.set_active(CPUDriver(target="riscv64"))
    kernel = triton.jit(shift_right_kernel.fn)
    x = torch.arange(64, dtype=torch.float32)
    with pytest.raises(TypeError, match="an address alone"):
        kernel[(1,)](x, Address(x), 64, 2, BLOCK=64)
