"""Pointers made from integers and dereferenced (to_linalg/pointers.py): a table of tensors' addresses,
as grouped GEMM and MoE kernels keep one, and an address passed as an integer, on the host and under QEMU
(where the launch translates them: driver/held_addresses.py); an address the compile cannot trace to an
argument is refused with a clear error outside this process; and an op the conversion cannot take names
itself and its source line."""
import platform

import pytest
import torch
import triton
import triton.language as tl

from spine.errors import SpineCompilationError
from tests.driver.test_remote import board  # noqa: F401 (the stand-in board fixture)


@triton.jit
def table_kernel(table_ptr, out_ptr, n, BLOCK: tl.constexpr, ELEMENT: tl.constexpr):
    g = tl.program_id(0)
    a_ptr = tl.load(table_ptr + g).to(tl.pointer_type(ELEMENT))
    offs = tl.arange(0, BLOCK)
    x = tl.load(a_ptr + offs, mask=offs < n, other=0)
    tl.store(out_ptr + g * BLOCK + offs, x.to(tl.float32) * 2, mask=offs < n)
    tl.store(a_ptr + 1, tl.full((), 7, ELEMENT))    # and a store through it, at element 1


@triton.jit
def round_trip_kernel(x_ptr, out_ptr):
    address = tl.load(out_ptr)
    p = address.to(tl.pointer_type(tl.float32)) + 3
    tl.store(out_ptr + 1, p.to(tl.int64, bitcast=True) - address)


@pytest.fixture
def host():
    from spine.driver import CPUDriver
    triton.runtime.driver.set_active(CPUDriver(target="host"))


@pytest.mark.parametrize("dtype,element", [(torch.float32, tl.float32), (torch.float16, tl.float16),
                                           (torch.int8, tl.int8)])
def test_a_table_of_tensors_addresses_is_read_and_written_through(target, dtype, element):
    tensors = [(torch.rand(n) * 10).to(dtype) for n in (10, 37, 3)]
    before = [t.clone() for t in tensors]
    table = torch.tensor([t.data_ptr() for t in tensors], dtype=torch.int64)
    block = 64
    out = torch.zeros(3 * block)
    for i, t in enumerate(tensors):
        table_kernel[(1,)](table[i:], out[i * block:], t.numel(), BLOCK=block, ELEMENT=element)
    for i, (t, original) in enumerate(zip(tensors, before)):
        torch.testing.assert_close(out[i * block:i * block + t.numel()], original.float() * 2)
        assert t[1].item() == 7 and torch.equal(t[2:], original[2:]) and t[0] == original[0]


def test_the_integer_of_an_advanced_pointer_counts_its_elements(host):
    out = torch.zeros(2, dtype=torch.int64)
    out[0] = 1 << 20
    round_trip_kernel[(1,)](out, out)
    assert out[1].item() == 3 * 4


@triton.jit
def address_argument_kernel(address, out_ptr, n, BLOCK: tl.constexpr):
    """An address passed as an integer, and one made by adding an offset to it."""
    p = address.to(tl.pointer_type(tl.float32))
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(p + offs, mask=offs < n, other=0.0) + 1, mask=offs < n)
    q = (address + 8).to(tl.pointer_type(tl.float32))
    tl.store(q, -1.0)


def test_an_address_passed_as_an_integer(target):
    x = torch.rand(40)
    expected = x + 1
    out = torch.zeros(40)
    address_argument_kernel[(1,)](x.data_ptr(), out, 40, BLOCK=64)
    torch.testing.assert_close(out, expected)
    assert x[2].item() == -1.0


@triton.jit
def table_beside_its_results_kernel(table_ptr, BLOCK: tl.constexpr):
    """Reads through the table's first entry and stores what it read beside it, in the table's storage."""
    a_ptr = tl.load(table_ptr).to(tl.pointer_type(tl.int64))
    offs = tl.arange(0, BLOCK)
    tl.store(table_ptr + 1 + offs, tl.load(a_ptr + offs) * 3)


def test_a_written_table_keeps_this_process_addresses(target):
    """Under QEMU the table's copy holds the guest's addresses while the kernel runs; what comes back is
    the kernel's stores, and the entries as they were."""
    data = torch.arange(16, dtype=torch.int64)
    table = torch.zeros(17, dtype=torch.int64)
    table[0] = data.data_ptr()
    table_beside_its_results_kernel[(1,)](table, BLOCK=16)
    assert table[0].item() == data.data_ptr()
    assert torch.equal(table[1:], data * 3)


@triton.jit
def untraced_address_kernel(table_ptr, steps_ptr, out_ptr, n):
    address = tl.load(table_ptr)
    for i in range(n):   # an address carried through a loop: the compile cannot tell where it came from
        address += tl.load(steps_ptr + i)
    tl.store(out_ptr, tl.load(address.to(tl.pointer_type(tl.float32))))


@pytest.mark.skipif(platform.machine() == "riscv64", reason="riscv64 kernels run in this process there")
def test_under_qemu_an_address_of_unknown_origin_is_refused_before_it_runs():
    from spine.driver import CPUDriver
    triton.runtime.driver.set_active(CPUDriver(target="riscv64"))
    t = torch.rand(8)
    table = torch.tensor([t.data_ptr()], dtype=torch.int64)
    with pytest.raises(RuntimeError, match="dereferences pointers made from integers.*not under QEMU"):
        untraced_address_kernel[(1,)](table, torch.zeros(2, dtype=torch.int64), torch.zeros(1), 2)


def test_an_address_of_unknown_origin_is_followed_on_the_host(host):
    t = torch.rand(8)
    table = torch.tensor([t.data_ptr()], dtype=torch.int64)
    out = torch.zeros(1)
    untraced_address_kernel[(1,)](table, torch.tensor([4, 8], dtype=torch.int64), out, 2)
    assert out.item() == t[3].item()


@triton.jit
def pointer_tensor_kernel(table_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    ptrs = tl.load(table_ptr + offs).to(tl.pointer_type(tl.float32))
    tl.store(out_ptr + offs, tl.load(ptrs))


def test_an_op_the_conversion_cannot_take_names_itself_and_its_line(host):
    table = torch.zeros(4, dtype=torch.int64)
    with pytest.raises(SpineCompilationError, match=r"'tt\.\w+'.*kernel 'pointer_tensor_kernel' at .*"
                                                    r"test_pointer_tables\.py:\d+"):
        pointer_tensor_kernel[(1,)](table, torch.zeros(4), BLOCK=4)


@triton.jit
def optional_weight_kernel(x_ptr, w_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """FlagGems' batch norm: `if w_ptr:` tests the pointer's address (a null pointer means no weight)."""
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    if w_ptr:
        x = x * tl.load(w_ptr + offs, mask=offs < n)
    tl.store(out_ptr + offs, x, mask=offs < n)
    tl.store(out_ptr + BLOCK, (w_ptr + 3).to(tl.int64, bitcast=True) - w_ptr.to(tl.int64, bitcast=True))


def test_the_address_of_a_pointer_into_an_argument(target):
    x, w = torch.randn(20), torch.randn(20)
    out = torch.zeros(33)
    optional_weight_kernel[(1,)](x, w, out, 20, BLOCK=32)
    torch.testing.assert_close(out[:20], x * w)
    assert out[32].item() == 3 * 4                    # three fp32 elements further


def test_on_a_board_a_kernel_reading_host_addresses_is_refused(board):  # noqa: F811
    """A board's server owns its arena, whose addresses move as it grows: table entries are not translated
    there, and the launch says so before anything is sent."""
    t = torch.rand(8)
    table = torch.tensor([t.data_ptr()], dtype=torch.int64)
    with pytest.raises(RuntimeError, match="dereferences addresses it reads.*a board runs it on copies"):
        table_kernel[(1,)](table, torch.zeros(16), 8, BLOCK=16, ELEMENT=tl.float32)
    assert board.traffic.connections == 0 and board.traffic.files_sent == 0


def test_tensors_without_memory_alive_beside_the_table_are_passed_over(target):
    """torch.compile leaves tensors alive whose storage refuses its data pointer (it raises) or has none
    (a fake tensor's answers 0): the search for the tensors an address points into passes them over."""
    import warnings
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        fake = torch.empty(4)   # noqa: F841 (alive through the launch)
    traced = torch.empty(4)
    torch._C._set_throw_on_mutable_data_ptr(traced)
    meta = torch.empty(4, device="meta")   # noqa: F841
    x = torch.rand(40)
    expected, out = x + 1, torch.zeros(40)
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # and without a warning about the fake tensor's pointer
        address_argument_kernel[(1,)](x.data_ptr(), out, 40, BLOCK=64)
    torch.testing.assert_close(out, expected)


def test_tensors_that_touch_in_memory_are_told_apart(target):
    """Two tensors over adjacent halves of one buffer have storages of their own, which touch: the address
    where the first ends is the second's first element, and a table entry holding it reads the second."""
    buffer = bytearray(31 * 4)   # the first of 15 elements: its copy in the arena is padded, the second's not
    first = torch.frombuffer(buffer, dtype=torch.float32, count=15, offset=0)
    second = torch.frombuffer(buffer, dtype=torch.float32, count=16, offset=15 * 4)
    first.copy_(torch.arange(15.0))
    second.copy_(torch.arange(100.0, 116.0))
    table = torch.tensor([first.data_ptr(), second.data_ptr()], dtype=torch.int64)
    out = torch.zeros(2 * 16)
    table_kernel[(2,)](table, out, 15, BLOCK=16, ELEMENT=tl.float32)
    torch.testing.assert_close(out[:15], torch.arange(15.0) * 2)
    torch.testing.assert_close(out[16:31], torch.arange(100.0, 115.0) * 2)
    assert first[1].item() == 7 and second[1].item() == 7 and second[0].item() == 100.0
