import torch
import triton
import triton.language as tl


@triton.jit
def interleave_kernel(x_ptr, y_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    y = tl.load(y_ptr + offs)
    pairs = tl.join(x, y)                       # [BLOCK, 2]
    tl.store(out_ptr + tl.arange(0, 2 * BLOCK), tl.reshape(pairs, (2 * BLOCK,)))


def test_join_interleaves(target):
    x, y = torch.randn(16), torch.randn(16)
    out = torch.empty(32)
    interleave_kernel[(1,)](x, y, out, BLOCK=16)
    torch.testing.assert_close(out, torch.stack([x, y], dim=1).reshape(-1))


@triton.jit
def deinterleave_kernel(xy_ptr, re_ptr, im_ptr, BLOCK: tl.constexpr):
    pairs = tl.reshape(tl.load(xy_ptr + tl.arange(0, 2 * BLOCK)), (BLOCK, 2))
    re, im = tl.split(pairs)
    offs = tl.arange(0, BLOCK)
    tl.store(re_ptr + offs, re)
    tl.store(im_ptr + offs, im)


def test_split_deinterleaves(target):
    xy = torch.randn(32)
    re, im = torch.empty(16), torch.empty(16)
    deinterleave_kernel[(1,)](xy, re, im, BLOCK=16)
    torch.testing.assert_close(re, xy[0::2])
    torch.testing.assert_close(im, xy[1::2])


@triton.jit
def cat_kernel(x_ptr, y_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    both = tl.cat(tl.load(x_ptr + offs), tl.load(y_ptr + offs), can_reorder=True)
    tl.store(out_ptr, tl.sum(both, axis=0))


def test_cat(target):
    x, y = torch.randn(16), torch.randn(16)
    out = torch.empty(1)
    cat_kernel[(1,)](x, y, out, BLOCK=16)
    torch.testing.assert_close(out[0], x.sum() + y.sum(), rtol=1e-5, atol=1e-5)


@triton.jit
def gather_rows_kernel(x_ptr, idx_ptr, out_ptr, M: tl.constexpr, N: tl.constexpr):
    rm = tl.arange(0, M)
    rn = tl.arange(0, N)
    x = tl.load(x_ptr + rm[:, None] * N + rn[None, :])
    idx = tl.load(idx_ptr + rm[:, None] * N + rn[None, :])
    tl.store(out_ptr + rm[:, None] * N + rn[None, :], tl.gather(x, idx, 0))


def test_gather_along_axis(target):
    x = torch.randn(8, 4)
    idx = torch.randint(0, 8, (8, 4), dtype=torch.int32)
    out = torch.empty(8, 4)
    gather_rows_kernel[(1,)](x, idx, out, M=8, N=4)
    torch.testing.assert_close(out, torch.gather(x, 0, idx.long()))


@triton.jit
def histogram_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr, BINS: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, BLOCK))
    tl.store(out_ptr + tl.arange(0, BINS), tl.histogram(x, BINS))


def test_histogram(target):
    x = torch.randint(0, 10, (64,), dtype=torch.int32)
    out = torch.empty(8, dtype=torch.int32)
    histogram_kernel[(1,)](x, out, BLOCK=64, BINS=8)
    torch.testing.assert_close(out, torch.bincount(x, minlength=10)[:8].int())


@triton.jit
def bool_shapes_kernel(x_ptr, rows_ptr, t_ptr, r_ptr, j_ptr, s_ptr, BLOCK: tl.constexpr):
    # Shape ops on computed boolean tensors whose results have several uses.
    offs = tl.arange(0, BLOCK)
    flags = tl.load(x_ptr + offs) > 0
    col = flags[:, None]                                   # expand_dims, used twice below
    tile = tl.broadcast_to(col, (BLOCK, BLOCK))            # broadcast, used twice below
    tl.store(rows_ptr + offs, tl.sum(col.to(tl.int32), axis=1) + tl.sum(tile.to(tl.int32), axis=1))
    both = tile & tl.trans(tile)                           # trans
    tl.store(t_ptr + offs[:, None] * BLOCK + offs[None, :], both | tile)
    flat = tl.reshape(tile, (BLOCK * BLOCK,))              # reshape
    tl.store(r_ptr + tl.arange(0, BLOCK * BLOCK), flat ^ (flat == 0))
    pairs = tl.join(flags, flags == 0)                     # join
    tl.store(j_ptr + offs[:, None] * 2 + tl.arange(0, 2)[None, :], pairs & (pairs == pairs))
    first, second = tl.split(pairs)                        # split
    both_halves = tl.cat(first, second, can_reorder=True)  # cat
    tl.store(s_ptr + tl.arange(0, 2 * BLOCK), both_halves | (both_halves == 0))


def test_shape_ops_on_boolean_tensors(target):
    x = torch.randint(-2, 3, (8,), dtype=torch.int32)
    rows, t = torch.empty(8, dtype=torch.int32), torch.empty(8, 8, dtype=torch.bool)
    r, j = torch.empty(64, dtype=torch.bool), torch.empty(8, 2, dtype=torch.bool)
    s = torch.empty(16, dtype=torch.bool)
    bool_shapes_kernel[(1,)](x, rows, t, r, j, s, BLOCK=8)
    flags = x > 0
    tile = flags[:, None].expand(8, 8)
    assert torch.equal(rows, flags.int() * 9)
    assert torch.equal(t, (tile & tile.T) | tile)
    assert torch.equal(r, torch.ones(64, dtype=torch.bool))
    assert torch.equal(j, torch.stack([flags, ~flags], dim=1))
    assert torch.equal(s, torch.ones(16, dtype=torch.bool))


@triton.jit
def bool_gather_kernel(x_ptr, idx_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    flags = tl.load(x_ptr + offs) > 0
    picked = tl.gather(flags, tl.load(idx_ptr + offs), 0)
    tl.store(out_ptr + offs, picked | (picked == 0) & (offs < 0))


def test_gather_of_a_boolean_tensor(target):
    x = torch.randint(-2, 3, (16,), dtype=torch.int32)
    idx = torch.randint(0, 16, (16,), dtype=torch.int32)
    out = torch.empty(16, dtype=torch.bool)
    bool_gather_kernel[(1,)](x, idx, out, BLOCK=16)
    assert torch.equal(out, (x > 0)[idx.long()])


@triton.jit
def scalar_join_split_kernel(x_ptr, out_ptr):
    # joining two scalars makes a 2-element tensor; splitting it unsplats each half back to a scalar
    a, b = tl.split(tl.join(tl.load(x_ptr), tl.load(x_ptr + 1)))
    tl.store(out_ptr, b)
    tl.store(out_ptr + 1, a)
    c, d = tl.split(tl.join(tl.load(x_ptr) > 0, tl.load(x_ptr + 1) > 0))
    tl.store(out_ptr + 2, (c & ~d).to(tl.float32))


def test_split_of_joined_scalars(target):
    x = torch.tensor([1.5, -2.0])
    out = torch.empty(3)
    scalar_join_split_kernel[(1,)](x, out)
    assert out.tolist() == [-2.0, 1.5, 1.0]
