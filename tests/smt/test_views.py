"""smt.view of tensors and smt.descriptor_load: sub-blocks at static and run-time offsets, packing,
unpacking, repacking, and the compile errors for shapes that do not divide."""
import pytest
import torch
import triton
import triton.language as tl
import triton.language.extra.smt as smt
from triton.compiler.errors import CompilationError


@triton.jit
def view_kernel(x_ptr, out_ptr, row, col, R: tl.constexpr, C: tl.constexpr, S0: tl.constexpr, S1: tl.constexpr,
                P0: tl.constexpr, P1: tl.constexpr, Q0: tl.constexpr, Q1: tl.constexpr, STATIC: tl.constexpr):
    """out = unpack(view(view(x, offsets, (S0, S1), (P0, P1)), whole, (Q0, Q1))): a sub-block, packed, repacked."""
    x = tl.load(x_ptr + tl.arange(0, R)[:, None] * C + tl.arange(0, C)[None, :])
    if STATIC:
        tiles = smt.view(x, (8, 16), (S0, S1), (P0, P1))
    else:
        tiles = smt.view(x, (row, col), (S0, S1), (P0, P1))
    tiles = smt.view(tiles, (0, 0), (S0, S1), (Q0, Q1))
    part = smt.view(tiles, (0, 0), (S0, S1), (1, 1))
    tl.store(out_ptr + tl.arange(0, S0)[:, None] * S1 + tl.arange(0, S1)[None, :], part)


@pytest.mark.parametrize("static", [True, False])
@pytest.mark.parametrize("packing,repacking", [((4, 8), (4, 8)), ((4, 8), (8, 2)), ((1, 1), (16, 16))])
def test_view_roundtrip(target, static, packing, repacking):
    x = torch.randn(32, 64)
    out = torch.empty(16, 32)
    view_kernel[(1,)](x, out, 8, 16, R=32, C=64, S0=16, S1=32, P0=packing[0], P1=packing[1], Q0=repacking[0],
                      Q1=repacking[1], STATIC=static)
    assert torch.equal(out, x[8:24, 16:48])


def test_run_time_offsets_stay_inside(target):
    """An offset past the end is clamped: the view reads the last full window instead of other memory."""
    x = torch.randn(32, 64)
    out = torch.empty(16, 32)
    view_kernel[(1,)](x, out, 100, -5, R=32, C=64, S0=16, S1=32, P0=4, P1=8, Q0=4, Q1=8, STATIC=False)
    assert torch.equal(out, x[16:32, 0:32])


@triton.jit
def tile_slice_kernel(x_ptr, out_ptr, t, R: tl.constexpr, C: tl.constexpr, P0: tl.constexpr, P1: tl.constexpr):
    """Whole micro tiles of a packed tensor: rows [t * P0, t * P0 + 2 * P0) of the unpacked matrix."""
    x = smt.view(tl.load(x_ptr + tl.arange(0, R)[:, None] * C + tl.arange(0, C)[None, :]), (0, 0), (R, C),
                 (P0, P1))
    part = smt.view(x, (t * P0, P1), (2 * P0, C - P1))
    part = smt.view(part, (0, 0), (2 * P0, C - P1), (1, 1))
    tl.store(out_ptr + tl.arange(0, 2 * P0)[:, None] * (C - P1) + tl.arange(0, C - P1)[None, :], part)


def test_view_of_packed_tiles(target):
    x = torch.randn(32, 16)
    out = torch.empty(8, 8)
    tile_slice_kernel[(1,)](x, out, 3, R=32, C=16, P0=4, P1=8)
    assert torch.equal(out, x[12:20, 8:16])


@triton.jit
def descriptor_load_kernel(x_ptr, out_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    block = tl.make_block_ptr(x_ptr, shape=[M, N], strides=[N, 1], offsets=[0, 0], block_shape=[BM, BN],
                              order=[1, 0])
    tile = smt.descriptor_load(block, (BM // 2, 3))
    tl.store(out_ptr + tl.arange(0, BM)[:, None] * BN + tl.arange(0, BN)[None, :], tile)


def test_descriptor_load_pads_with_zeros(target):
    x = torch.randn(20, 10)
    out = torch.empty(16, 8)
    descriptor_load_kernel[(1,)](x, out, 20, 10, BM=16, BN=8)
    expected = torch.zeros(16, 8)
    expected[:12, :7] = x[8:20, 3:10]
    assert torch.equal(out, expected)


@triton.jit
def bad_view_kernel(x_ptr, P0: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, 16)[:, None] * 16 + tl.arange(0, 16)[None, :])
    tiles = smt.view(x, (0, 0), (16, 16), (P0, 4))
    tl.store(x_ptr + tl.arange(0, 16)[:, None] * 16 + tl.arange(0, 16)[None, :], smt.view(tiles, (0, 0), (16, 16),
                                                                                          (1, 1)))


def test_shapes_that_do_not_divide_are_compile_errors():
    triton.runtime.driver.set_active(__import__("spine.driver", fromlist=["CPUDriver"]).CPUDriver(target="host"))
    with pytest.raises(CompilationError) as err:
        bad_view_kernel[(1,)](torch.zeros(16, 16), P0=3)
    message = str(err.value)
    assert "not a multiple of packed_size (3, 4)" in message
    assert "smt.view(x, (0, 0), (16, 16), (P0, 4))" in message   # the source line


@triton.jit
def large_block_kernel(x_ptr, out_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    """Blocks above the stack-tile limit: interior ones are read in place, edge ones padded in a buffer."""
    block = tl.make_block_ptr(x_ptr, shape=[M, N], strides=[N, 1], offsets=[tl.program_id(0) * BM, 0],
                              block_shape=[BM, BN], order=[1, 0])
    tile = smt.descriptor_load(block, (0, 0))
    rows = tl.program_id(0) * BM + tl.arange(0, BM)[:, None]
    tl.store(out_ptr + rows * BN + tl.arange(0, BN)[None, :], tile + 1)


def test_descriptor_load_of_large_blocks(target):
    x = torch.randn(300, 256)
    out = torch.empty(384, 256)
    large_block_kernel[(3,)](x, out, 300, 256, BM=128, BN=256)
    expected = torch.ones(384, 256)
    expected[:300] += x
    assert torch.equal(out, expected)
