"""tle (FlagTree's tile language, `triton.language.extra.tle`): extract_tile and insert_tile against
slicing in torch, with constant, per-dimension and run-time indices, in 1-D, 2-D and 3-D; tle.load."""
import pytest
import torch
import triton
import triton.language as tl
import triton.language.extra.tle as tle
from triton.compiler.errors import CompilationError


@triton.jit
def tiles_2d_kernel(x_ptr, t_ptr, out_ptr, i, j, M: tl.constexpr, N: tl.constexpr, TM: tl.constexpr,
                    TN: tl.constexpr, MODE: tl.constexpr):
    offs = tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :]
    tile_offs = tl.arange(0, TM)[:, None] * TN + tl.arange(0, TN)[None, :]
    x = tl.load(x_ptr + offs)
    new = tl.load(t_ptr + tile_offs)
    if MODE == 0:       # constant coordinates
        tile = tle.extract_tile(x, [1, 2], [TM, TN])
        y = tle.insert_tile(x, new, [1, 2])
    elif MODE == 1:     # run-time coordinates
        tile = tle.extract_tile(x, [i, j], [TM, TN])
        y = tle.insert_tile(x, new, [i, j])
    else:               # a run-time row-major tile number
        tile = tle.extract_tile(x, i * (N // TN) + j, [TM, TN])
        y = tle.insert_tile(x, new, i * (N // TN) + j)
    tl.store(out_ptr + tile_offs, tile)
    tl.store(out_ptr + TM * TN + offs, y)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int8, torch.float16])
@pytest.mark.parametrize("mode", [0, 1, 2])
def test_tiles_of_a_matrix(target, dtype, mode):
    m, n, tm, tn = 8, 16, 2, 4
    x = (torch.randn(m, n) * 50).to(dtype)
    x.view(-1)[5] = -0.0 if dtype.is_floating_point else 0
    new = (torch.randn(tm, tn) * 50).to(dtype)
    out = torch.empty(tm * tn + m * n, dtype=dtype)
    i, j = 1, 2
    tiles_2d_kernel[(1,)](x, new, out, i, j, M=m, N=n, TM=tm, TN=tn, MODE=mode)
    rows, cols = slice(i * tm, (i + 1) * tm), slice(j * tn, (j + 1) * tn)
    assert torch.equal(out[:tm * tn].view(tm, tn), x[rows, cols])
    expected = x.clone()
    expected[rows, cols] = new
    assert torch.equal(out[tm * tn:].view(m, n), expected)
    if dtype.is_floating_point:     # bit for bit: the sign of zero survives
        assert torch.equal(out[tm * tn:].view(torch.int16 if dtype == torch.float16 else torch.int32),
                           expected.view(-1).view(torch.int16 if dtype == torch.float16 else torch.int32))


@triton.jit
def tiles_nd_kernel(x_ptr, out_ptr, k, A: tl.constexpr, B: tl.constexpr, C: tl.constexpr, TA: tl.constexpr,
                    TB: tl.constexpr, TC: tl.constexpr, ONE_D: tl.constexpr):
    if ONE_D:
        x = tl.load(x_ptr + tl.arange(0, A))
        tl.store(out_ptr + tl.arange(0, TA), tle.extract_tile(x, k, [TA]))
        tl.store(out_ptr + TA + tl.arange(0, A), tle.insert_tile(x, tl.zeros([TA], x.dtype), 3))
    else:
        offs = (tl.arange(0, A)[:, None, None] * B * C + tl.arange(0, B)[None, :, None] * C
                + tl.arange(0, C)[None, None, :])
        tile_offs = (tl.arange(0, TA)[:, None, None] * TB * TC + tl.arange(0, TB)[None, :, None] * TC
                     + tl.arange(0, TC)[None, None, :])
        x = tl.load(x_ptr + offs)
        tile = tle.extract_tile(x, [1, k, 0], [TA, TB, TC])
        tl.store(out_ptr + tile_offs, tile)
        tl.store(out_ptr + TA * TB * TC + offs, tle.insert_tile(x, tile * 0 - 1, [0, 1, 1]))


def test_tiles_in_one_and_three_dimensions(target):
    x = torch.randn(32)
    out = torch.empty(8 + 32)
    tiles_nd_kernel[(1,)](x, out, 2, A=32, B=1, C=1, TA=8, TB=1, TC=1, ONE_D=True)
    assert torch.equal(out[:8], x[16:24])
    expected = x.clone()
    expected[24:32] = 0
    assert torch.equal(out[8:], expected)

    x = torch.randn(4, 8, 16)
    out = torch.empty(2 * 4 * 8 + x.numel())
    tiles_nd_kernel[(1,)](x, out, 1, A=4, B=8, C=16, TA=2, TB=4, TC=8, ONE_D=False)
    assert torch.equal(out[:64].view(2, 4, 8), x[2:4, 4:8, 0:8])
    expected = x.clone()
    expected[0:2, 4:8, 8:16] = -1
    assert torch.equal(out[64:].view(4, 8, 16), expected)


@triton.jit
def bad_index_kernel(x_ptr, I: tl.constexpr, J: tl.constexpr, TM: tl.constexpr):
    offs = tl.arange(0, 8)[:, None] * 8 + tl.arange(0, 8)[None, :]
    tile = tle.extract_tile(tl.load(x_ptr + offs), [I, J], [TM, 4])
    tl.store(x_ptr + tl.arange(0, TM)[:, None] * 4 + tl.arange(0, 4)[None, :], tile)


def test_bad_indices_and_shapes_are_clear_errors(target):
    x = torch.zeros(64)
    with pytest.raises(CompilationError, match=r"tile coordinate 1 \(2\) out of range \[0, 2\)"):
        bad_index_kernel[(1,)](x, I=0, J=2, TM=2)
    with pytest.raises(CompilationError, match=r"source dimension 0 \(8\) is not a multiple of the tile's \(16\)"):
        bad_index_kernel[(1,)](x, I=0, J=0, TM=16)


@triton.jit
def async_load_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tle.load(x_ptr + offs, mask=offs < n, other=0.0, is_async=True) + 1, mask=offs < n)


def test_load(target):
    x = torch.randn(100)
    y = torch.empty(100)
    async_load_kernel[(1,)](x, y, 100, BLOCK=128)
    torch.testing.assert_close(y, x + 1)
