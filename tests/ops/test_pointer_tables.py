"""Pointers made from integers and dereferenced (to_linalg/pointers.py): a table of tensors' addresses,
as grouped GEMM and MoE kernels keep one, on the host; refused with a clear error where kernels do not
run in this process; and an op the conversion cannot take names itself and its source line."""
import platform

import pytest
import torch
import triton
import triton.language as tl

from spine.errors import SpineCompilationError


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
def test_a_table_of_tensors_addresses_is_read_and_written_through(host, dtype, element):
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


@pytest.mark.skipif(platform.machine() == "riscv64", reason="riscv64 kernels run in this process there")
def test_under_qemu_a_kernel_reading_host_addresses_is_refused_before_it_runs():
    from spine.driver import CPUDriver
    triton.runtime.driver.set_active(CPUDriver(target="riscv64"))
    t = torch.rand(8)
    table = torch.tensor([t.data_ptr()], dtype=torch.int64)
    with pytest.raises(RuntimeError, match="dereferences pointers made from integers.*not under QEMU"):
        table_kernel[(1,)](table, torch.zeros(16), 8, BLOCK=16, ELEMENT=tl.float32)


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
