"""Pointer casts between element types of different widths (to_linalg/pointers.py): the argument is seen as
the new element type, offsets and strides rescaled to its width."""
import pytest
import torch
import triton
import triton.language as tl

from spine.errors import OutOfBoundsError


@triton.jit
def store_wide_kernel(out_ptr):
    # Triton's test_constexpr: a 64-bit value through an fp32 tensor's pointer
    tl.store(out_ptr.to(tl.pointer_type(tl.float64)), 1e+50)


def test_scalar_store_through_a_wider_pointee(target):
    out = torch.zeros(4, dtype=torch.float32)
    store_wide_kernel[(1,)](out)
    assert out[:2].view(torch.float64).item() == 1e+50
    assert (out[2:] == 0).all()


@triton.jit
def wide_tile_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    # int32 pairs read as int64: element k of the wide view is int32 elements 2k, 2k+1
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    wide = x_ptr.to(tl.pointer_type(tl.int64), bitcast=True)
    tl.store(out_ptr + offs, tl.load(wide + offs))


def test_tile_through_a_wider_pointee(target):
    x = torch.randint(-2**31, 2**31 - 1, (64,), dtype=torch.int32)
    out = torch.empty(32, dtype=torch.int64)
    wide_tile_kernel[(2,)](x, out, BLOCK=16)
    assert torch.equal(out, x.view(torch.int64))


@triton.jit
def narrow_tile_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    # a tile of fp32 pointers cast to byte pointers: each points at its element's lowest byte
    offs = tl.arange(0, BLOCK)
    low = (x_ptr + 2 * offs).to(tl.pointer_type(tl.uint8), bitcast=True)
    tl.store(out_ptr + offs, tl.load(low + 1))


def test_strided_tile_through_a_narrower_pointee(target):
    x = torch.randn(32)
    out = torch.empty(16, dtype=torch.uint8)
    narrow_tile_kernel[(1,)](x, out, BLOCK=16)
    assert torch.equal(out, x.view(torch.uint8).view(32, 4)[::2, 1])


@triton.jit
def narrow_gather_kernel(x_ptr, idx_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    ptrs = (x_ptr + tl.load(idx_ptr + offs)).to(tl.pointer_type(tl.int16), bitcast=True)
    tl.store(out_ptr + offs, tl.load(ptrs + 1))


def test_gather_through_a_narrower_pointee(target):
    x = torch.randn(16)
    idx = torch.randperm(16, dtype=torch.int32)
    out = torch.empty(16, dtype=torch.int16)
    narrow_gather_kernel[(1,)](x, idx, out, BLOCK=16)
    assert torch.equal(out, x.view(torch.int16).view(16, 2)[idx.long(), 1])


def test_bounds_of_a_wider_view(target):
    out = torch.zeros(2, dtype=torch.float32)
    store_wide_kernel[(1,)](out, debug=True)            # 8 bytes: the f64 view has one element
    assert out.view(torch.float64).item() == 1e+50
    x = torch.zeros(62, dtype=torch.int32)              # 31 int64 elements: the 32nd is outside
    with pytest.raises(OutOfBoundsError):
        wide_tile_kernel[(2,)](x, torch.empty(32, dtype=torch.int64), BLOCK=16, debug=True)
