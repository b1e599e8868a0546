"""Copying a tile out of its source into a local buffer, the way a masked or dot-feeding tl.load does.

A 2-D tile read across its source's rows (a transposed operand, as nn.Linear's weight is for x @ W^T:
element (k, n) at n * K + k, stride 1 along the first dimension) must be transposed on the way. Copied
element by element through transposed views, the inner loop reads memory in order (one cache line serves
16 elements rather than one) and writes with a stride: RVV has strided stores for that, but x86 has only
AVX-512 scatters, which LLVM's vectoriser then picks and which took twice as long as the matmul the tile
fed. On x86 (`by_shuffles`) whole 32-bit tiles are therefore copied by 8 x 8 blocks: eight row loads,
the transpose in registers (24 shuffles: 32-bit, 64-bit and 128-bit interleaves, as in the usual AVX
8 x 8 transpose), eight row stores.
"""
from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, linalg, memref, scf, vector

from . import index_math as im

BLOCK = 8


def copy_tile(source: ir.Value, destination: ir.Value, strides, by_shuffles: bool = False) -> None:
    """destination = source (memrefs of one shape); `strides` are the source's, in elements."""
    if len(strides) == 2 and strides[0] == 1 and strides[1] != 1:
        if by_shuffles and shuffle_transposable(ir.MemRefType(destination.type)):
            _copy_by_blocks(transposed(source), destination)
            return
        source, destination = transposed(source), transposed(destination)
    linalg.copy(source, outs=[destination])


def shuffle_transposable(tile_type: ir.MemRefType) -> bool:
    """Whether copy_tile can transpose a whole tile of this type by blocks: 32-bit elements, static
    sizes that are multiples of the block."""
    elem = tile_type.element_type
    width = getattr(elem, "width", None)
    return (tile_type.rank == 2 and width == 32 and all(n != ir.ShapedType.get_dynamic_size() and n % BLOCK == 0
                                                        for n in tile_type.shape))


def transposed(view: ir.Value) -> ir.Value:
    view_type = ir.MemRefType(view.type)
    strides, offset = view_type.get_strides_and_offset()
    layout = ir.StridedLayoutAttr.get(offset, list(reversed(strides)))
    result = ir.MemRefType.get(list(reversed(view_type.shape)), view_type.element_type, layout=layout)
    swap = ir.AffineMapAttr.get(ir.AffineMap.get_permutation([1, 0]))
    return memref.TransposeOp(result, view, swap).result


def _copy_by_blocks(rows: ir.Value, destination: ir.Value) -> None:
    """destination[k][n] = rows[n][k], both unit-stride along their last dimension."""
    n_total, k_total = ir.MemRefType(rows.type).shape
    row_type = ir.VectorType.get([BLOCK], ir.MemRefType(rows.type).element_type)
    step = im.const(BLOCK)
    outer = scf.ForOp(im.const(0), im.const(n_total), step)
    with ir.InsertionPoint(outer.body):
        n0 = outer.induction_variable
        inner = scf.ForOp(im.const(0), im.const(k_total), step)
        with ir.InsertionPoint(inner.body):
            k0 = inner.induction_variable
            loaded = [vector.LoadOp(row_type, rows, [_plus(n0, i), k0]).result for i in range(BLOCK)]
            for j, column in enumerate(_transpose(loaded)):
                vector.StoreOp(column, destination, [_plus(k0, j), n0])
            scf.YieldOp([])
        scf.YieldOp([])


def _plus(index: ir.Value, constant: int) -> ir.Value:
    return index if constant == 0 else arith.AddIOp(index, im.const(constant)).result


def _shuffle(a: ir.Value, b: ir.Value, mask) -> ir.Value:
    return vector.ShuffleOp(a, b, mask).result


def _transpose(rows: list) -> list:
    """The columns of an 8 x 8 block given as 8 row vectors: result[j][i] = rows[i][j]."""
    pairs = []          # rows 2i and 2i+1 interleaved: (a0 b0 a1 b1 a4 b4 a5 b5), (a2 b2 a3 b3 a6 b6 a7 b7)
    for i in range(0, BLOCK, 2):
        pairs.append(_shuffle(rows[i], rows[i + 1], [0, 8, 1, 9, 4, 12, 5, 13]))
        pairs.append(_shuffle(rows[i], rows[i + 1], [2, 10, 3, 11, 6, 14, 7, 15]))
    quads = []          # four rows' elements j and j + 4: (a_j b_j c_j d_j a_j+4 b_j+4 c_j+4 d_j+4), j = 0..3
    for i in (0, 4):
        quads.append(_shuffle(pairs[i], pairs[i + 2], [0, 1, 8, 9, 4, 5, 12, 13]))
        quads.append(_shuffle(pairs[i], pairs[i + 2], [2, 3, 10, 11, 6, 7, 14, 15]))
        quads.append(_shuffle(pairs[i + 1], pairs[i + 3], [0, 1, 8, 9, 4, 5, 12, 13]))
        quads.append(_shuffle(pairs[i + 1], pairs[i + 3], [2, 3, 10, 11, 6, 7, 14, 15]))
    columns = [None] * BLOCK
    for j in range(4):  # halves of rows 0-3 and rows 4-7
        columns[j] = _shuffle(quads[j], quads[j + 4], [0, 1, 2, 3, 8, 9, 10, 11])
        columns[j + 4] = _shuffle(quads[j], quads[j + 4], [4, 5, 6, 7, 12, 13, 14, 15])
    return columns
