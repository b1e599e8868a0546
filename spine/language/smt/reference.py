"""The smt operations as plain Triton: each is a `noinline` device function, so it reaches TTIR as a
`tt.call` to a symbol named after this module (`spine.language.smt.reference.<op>__<mangled types>`).

The conversion (to_linalg/smt_calls.py) recognises calls by that reserved prefix and replaces each with
its own lowering (linalg packs and transposes, a packed matmul with a register-blocked micro-kernel); it
never reads these bodies. They are here so that the TTIR stays ordinary, verifiable Triton, and as the
executable definition of what each operation computes.

The builtins call these through the code generator (`call_JitFunction`), not as a kernel would: triton's
frontend refuses tensor arguments to noinline functions written in a kernel, because GPU backends cannot
pass tensors between functions; these calls are never made as calls.

Shapes are in elements unless a name says tiles; every shape is a power of two, as all Triton tensors.
"""
import triton
import triton.language as tl

RESERVED_PREFIX = "spine.language.smt."


@triton.jit(noinline=True)
def slice2d(x, row, col, ROWS: tl.constexpr, COLS: tl.constexpr):
    """x[row:row+ROWS, col:col+COLS] of a 2-D tensor."""
    rows = row + tl.arange(0, ROWS)
    cols = col + tl.arange(0, COLS)
    picked = tl.gather(x, tl.broadcast_to(rows[:, None], (ROWS, x.shape[1])), 0)
    return tl.gather(picked, tl.broadcast_to(cols[None, :], (ROWS, COLS)), 1)


@triton.jit(noinline=True)
def pack(x, P0: tl.constexpr, P1: tl.constexpr):
    """[R, C] -> [R/P0, C/P1, P0, P1]: element (r, c) goes to [r // P0, c // P1, r % P0, c % P1]."""
    tiles = tl.reshape(x, (x.shape[0] // P0, P0, x.shape[1] // P1, P1))
    return tl.permute(tiles, (0, 2, 1, 3))


@triton.jit(noinline=True)
def unpack(x):
    """The inverse of pack: [R1, C1, P0, P1] -> [R1 * P0, C1 * P1]."""
    rows = tl.permute(x, (0, 2, 1, 3))
    return tl.reshape(rows, (x.shape[0] * x.shape[2], x.shape[1] * x.shape[3]))


@triton.jit(noinline=True)
def slice4d(x, row_tile, col_tile, ROW_TILES: tl.constexpr, COL_TILES: tl.constexpr):
    """Whole micro tiles of a packed tensor: x[row_tile:row_tile+ROW_TILES, col_tile:col_tile+COL_TILES]."""
    flat = tl.reshape(x, (x.shape[0], x.shape[1] * x.shape[2] * x.shape[3]))
    rows = row_tile + tl.arange(0, ROW_TILES)
    picked = tl.gather(flat, tl.broadcast_to(rows[:, None], (ROW_TILES, flat.shape[1])), 0)
    picked = tl.reshape(picked, (ROW_TILES, x.shape[1], x.shape[2] * x.shape[3]))
    picked = tl.permute(picked, (1, 0, 2))
    picked = tl.reshape(picked, (x.shape[1], ROW_TILES * x.shape[2] * x.shape[3]))
    cols = col_tile + tl.arange(0, COL_TILES)
    picked = tl.gather(picked, tl.broadcast_to(cols[:, None], (COL_TILES, picked.shape[1])), 0)
    picked = tl.reshape(picked, (COL_TILES, ROW_TILES, x.shape[2], x.shape[3]))
    return tl.permute(picked, (1, 0, 2, 3))


@triton.jit
def _product(a, b, ACC: tl.constexpr):
    """The packed product as one matrix product: [M1, K1, m, k] x [K1, N1, k, n] -> [M1, N1, m, n] in ACC."""
    a2 = tl.reshape(tl.permute(a, (0, 2, 1, 3)), (a.shape[0] * a.shape[2], a.shape[1] * a.shape[3]))
    b2 = tl.reshape(tl.permute(b, (0, 2, 1, 3)), (b.shape[0] * b.shape[2], b.shape[1] * b.shape[3]))
    c2 = tl.dot(a2, b2, out_dtype=ACC)
    return tl.permute(tl.reshape(c2, (a.shape[0], a.shape[2], b.shape[1], b.shape[3])), (0, 2, 1, 3))


@triton.jit(noinline=True)
def dot(a, b, ACC: tl.constexpr, OUT: tl.constexpr):
    """a @ b of packed tiles, summed in ACC (fp32, or int32 for int8), returned as OUT."""
    return _product(a, b, ACC).to(OUT)


@triton.jit(noinline=True)
def dot_acc(a, b, c, ACC: tl.constexpr):
    """c + a @ b of packed tiles, summed in ACC and rounded once to c's type."""
    return (c.to(ACC) + _product(a, b, ACC)).to(c.dtype)


@triton.jit(noinline=True)
def scratch(NUMEL: tl.constexpr, POINTER: tl.constexpr):
    """A buffer of NUMEL elements. Plain Triton cannot allocate memory: the conversion gives every call its
    own buffer (on the stack when small); this body, a null pointer, is never run."""
    return tl.full((), 0, tl.int64).to(POINTER)
