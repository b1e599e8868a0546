"""Copying a tile out of its source into a local buffer, the way a masked or dot-feeding tl.load does
(and packing a B read across its rows into the packed matmul's panels, smt_panels.pack_b).

A 2-D tile read across its source's rows (a transposed operand, as nn.Linear's weight is for x @ W^T:
element (k, n) at n * K + k, stride 1 along the first dimension) must be transposed on the way. Copied
element by element through transposed views, the inner loop reads memory in order (one cache line serves
16 elements rather than one) and writes with a stride: RVV has strided stores for that, but x86 has only
AVX-512 scatters, which LLVM's vectoriser then picks and which took twice as long as the matmul the tile
fed. On x86 (`lanes`, the vector width in 32-bit elements) whole 32-bit tiles are therefore copied by
square blocks: a row load per block row, the transpose in registers, a row store per block column.
8 x 8 blocks (AVX2) use the usual 24 shuffles (32-bit, 64-bit and 128-bit interleaves, each one AVX
instruction); 16 x 16 blocks (AVX-512) swap ever smaller off-diagonal sub-blocks (Eklundh's scheme):
64 two-source shuffles, each one AVX-512 permute, for four times the elements.
"""
from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, linalg, memref, scf, vector

from . import index_math as im

BLOCKS = (16, 8)


def copy_tile(source: ir.Value, destination: ir.Value, strides, block: int = 0) -> None:
    """destination = source (memrefs of one shape); `strides` are the source's, in elements; `block`: the
    blocks a transposed tile is copied by in registers (transpose_block; 0: element by element)."""
    if _read_across_rows(strides):
        if block:
            copy_by_blocks(transposed(source), destination, block)
            return
        source, destination = transposed(source), transposed(destination)
    linalg.copy(source, outs=[destination])


def transpose_block(tile_type: ir.MemRefType, strides, lanes: int) -> int:
    """The block copy_tile transposes a whole tile of this type, read with these strides, by (0: none):
    a tile read across its source's rows, of 32-bit elements and static sizes that are multiples of the
    block, the block no wider than `lanes`."""
    elem = tile_type.element_type
    if (not _read_across_rows(strides) or tile_type.rank != 2 or getattr(elem, "width", None) != 32
            or ir.ShapedType.get_dynamic_size() in tile_type.shape):
        return 0
    return next((block for block in BLOCKS if block <= lanes and all(n % block == 0 for n in tile_type.shape)), 0)


def _read_across_rows(strides) -> bool:
    return len(strides) == 2 and strides[0] == 1 and strides[1] != 1


def transposed(view: ir.Value) -> ir.Value:
    view_type = ir.MemRefType(view.type)
    strides, offset = view_type.get_strides_and_offset()
    layout = ir.StridedLayoutAttr.get(offset, list(reversed(strides)))
    result = ir.MemRefType.get(list(reversed(view_type.shape)), view_type.element_type, layout=layout)
    swap = ir.AffineMapAttr.get(ir.AffineMap.get_permutation([1, 0]))
    return memref.TransposeOp(result, view, swap).result


def copy_by_blocks(rows: ir.Value, destination: ir.Value, block: int) -> None:
    """destination[k][n] = rows[n][k], both unit-stride along their last dimension."""
    n_total, k_total = ir.MemRefType(rows.type).shape
    row_type = ir.VectorType.get([block], ir.MemRefType(rows.type).element_type)
    step = im.const(block)
    outer = scf.ForOp(im.const(0), im.const(n_total), step)
    with ir.InsertionPoint(outer.body):
        n0 = outer.induction_variable
        inner = scf.ForOp(im.const(0), im.const(k_total), step)
        with ir.InsertionPoint(inner.body):
            k0 = inner.induction_variable
            loaded = [vector.LoadOp(row_type, rows, [_plus(n0, i), k0]).result for i in range(block)]
            for j, column in enumerate(_transpose8(loaded) if block == 8 else _transpose_by_halves(loaded)):
                vector.StoreOp(column, destination, [_plus(k0, j), n0])
            scf.YieldOp([])
        scf.YieldOp([])


def _plus(index: ir.Value, constant: int) -> ir.Value:
    return index if constant == 0 else arith.AddIOp(index, im.const(constant)).result


def _shuffle(a: ir.Value, b: ir.Value, mask) -> ir.Value:
    return vector.ShuffleOp(a, b, mask).result


def _transpose_by_halves(rows: list) -> list:
    """The columns of an n x n block given as n row vectors (n a power of two): for h = n/2, n/4, ... 1,
    rows i and i + h (i with bit h clear) swap their off-diagonal h x h sub-blocks."""
    n = len(rows)
    rows = list(rows)
    h = n // 2
    while h:
        for i in range(n):
            if i & h:
                continue
            upper, lower = rows[i], rows[i + h]
            rows[i] = _shuffle(upper, lower, [p if not p & h else n + p - h for p in range(n)])
            rows[i + h] = _shuffle(upper, lower, [p + h if not p & h else n + p for p in range(n)])
        h //= 2
    return rows


def _transpose8(rows: list) -> list:
    """The columns of an 8 x 8 block given as 8 row vectors: result[j][i] = rows[i][j]."""
    pairs = []          # rows 2i and 2i+1 interleaved: (a0 b0 a1 b1 a4 b4 a5 b5), (a2 b2 a3 b3 a6 b6 a7 b7)
    for i in range(0, 8, 2):
        pairs.append(_shuffle(rows[i], rows[i + 1], [0, 8, 1, 9, 4, 12, 5, 13]))
        pairs.append(_shuffle(rows[i], rows[i + 1], [2, 10, 3, 11, 6, 14, 7, 15]))
    quads = []          # four rows' elements j and j + 4: (a_j b_j c_j d_j a_j+4 b_j+4 c_j+4 d_j+4), j = 0..3
    for i in (0, 4):
        quads.append(_shuffle(pairs[i], pairs[i + 2], [0, 1, 8, 9, 4, 5, 12, 13]))
        quads.append(_shuffle(pairs[i], pairs[i + 2], [2, 3, 10, 11, 6, 7, 14, 15]))
        quads.append(_shuffle(pairs[i + 1], pairs[i + 3], [0, 1, 8, 9, 4, 5, 12, 13]))
        quads.append(_shuffle(pairs[i + 1], pairs[i + 3], [2, 3, 10, 11, 6, 7, 14, 15]))
    columns = [None] * 8
    for j in range(4):  # halves of rows 0-3 and rows 4-7
        columns[j] = _shuffle(quads[j], quads[j + 4], [0, 1, 2, 3, 8, 9, 10, 11])
        columns[j + 4] = _shuffle(quads[j], quads[j + 4], [4, 5, 6, 7, 12, 13, 14, 15])
    return columns
