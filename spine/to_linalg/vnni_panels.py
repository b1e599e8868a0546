"""Operands in Intel's "VNNI" layout, for the x86 matrix products that take them (amx_matmul.py on AMX tiles,
vnni_matmul.py on AVX-512 VNNI and BF16 dot products): C (+)= A @ B with int8 or bf16 A and B.

Those instructions multiply G = 4 / element bytes consecutive k of A's row (4 int8, 2 bf16: 32 bits) by the
same k of one column of B, so B is stored with the G k of each column next to each other:

    VNNI row q of B = B[G q][0], ..., B[G q + G - 1][0], B[G q][1], ..., B[G q + G - 1][1], ...

Every operand is a "tile matrix" (`Matrix`): an address and the bytes between its rows.

    A   read where it is (any row stride) when M fills whole register blocks and K whole k steps, else
        copied into a zero-padded row-major matrix (pack_a)
    B   packed into VNNI rows (pack_b), zeros past K and N; int8 optionally with its sign bit flipped
        (B + 128 as unsigned bytes: vpdpbusd multiplies unsigned by signed bytes)
    C   loaded (an accumulator) and stored where it is when it is made of whole register blocks, else
        computed in a padded matrix whose rows are added to C afterwards, masked past N (write_back)

`compute` does the above and leaves the register blocks to its caller."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from mlir import ir
from mlir.dialects import arith, llvm, memref, scf, vector

from ..ir_walk import named
from . import index_math as im
from . import kept_panels
from .smt_microkernel import ALIGNMENT, STACK_PANEL_BYTES
from .smt_panels import add, loop, mul

LANES = 16           # 32-bit sums per 64-byte vector (and columns of B per 64 bytes of a VNNI row)
SUM_BYTES = 4


def ceil(x: int, d: int) -> int:
    return -(-x // d)


@dataclass(frozen=True)
class Layout:
    """One product's sizes and how its operands are padded: M to whole blocks of `block_rows`, N to whole
    blocks of `block_cols`, K to whole steps of `k_step` (a multiple of G)."""
    m: int
    n: int
    k: int
    element: str        # "i8" or "bf16"
    sums: str           # "i32" or "f32"
    block_rows: int
    block_cols: int
    k_step: int

    @property
    def bytes(self) -> int:
        return 1 if self.element == "i8" else 2

    @property
    def group(self) -> int:
        """k that lie next to each other in a VNNI row."""
        return 4 // self.bytes

    @property
    def padded_m(self) -> int:
        return ceil(self.m, self.block_rows) * self.block_rows

    @property
    def padded_n(self) -> int:
        return ceil(self.n, self.block_cols) * self.block_cols

    @property
    def padded_k(self) -> int:
        return ceil(self.k, self.k_step) * self.k_step

    @property
    def a_row(self) -> int:
        """Elements of a row of A's padded copy: padded_k, rounded up to whole 64-byte vectors."""
        step = 64 // self.bytes
        return ceil(self.padded_k, step) * step

    @property
    def a_in_place(self) -> bool:
        """Whether A is read where it is: its rows fill whole register blocks and its k whole steps."""
        return self.m == self.padded_m and self.k == self.padded_k

    @property
    def c_in_place(self) -> bool:
        """Whether C is loaded and stored where it is: it is made of whole register blocks."""
        return self.m == self.padded_m and self.n == self.padded_n


@dataclass(frozen=True)
class Matrix:
    """A matrix as its blocks find it: row r starts at address + r * row_bytes."""
    address: ir.Value         # index
    row_bytes: object         # an int, or an index value (a view's row stride)

    def at(self, row, col_bytes) -> ir.Value:
        return add(self.address, mul(row, self.row_bytes), col_bytes)


Blocks = Callable[[Matrix, Matrix, Optional[Matrix], Matrix], None]


def compute(layout: Layout, a, b, earlier, c_out, blocks: Blocks, flip_b_sign: bool = False,
            shared: Optional[tuple] = None) -> None:
    """C_out = earlier (C_in, or C_out itself in place, or None) + A @ B: the operands as Matrix records,
    `blocks(a, b, start, out)` computing out = start (or zero) + a @ b over whole register blocks.
    `shared`: None, or (B's view as the kernel passed it, an i1): where the i1 holds, B's panel is the
    thread's for the rest of the launch (kept_panels.py), packed only if no earlier program packed it."""
    if layout.a_in_place:
        a_matrix = view(a, layout.bytes)
    else:
        ap = panel(layout.padded_m * layout.a_row * layout.bytes)
        pack_a(ap, a, layout)
        a_matrix = Matrix(address(ap), layout.a_row * layout.bytes)
    size = layout.padded_k * layout.padded_n * layout.bytes
    bp = panel(size)
    if shared is None:
        pack_b(address(bp), b, layout, flip_b_sign)
        b_address = address(bp)
    else:
        source, may_share = shared
        b_address = kept_panels.panel_address(
            source, 0, layout.bytes, kept_panels.packing_word("vnni", layout, flip_b_sign), size, may_share,
            lambda at: pack_b(at, b, layout, flip_b_sign), address(bp))
    b_matrix = Matrix(b_address, layout.padded_n * 4)      # a VNNI row: G elements of each column
    if layout.c_in_place:
        start = sums_matrix(earlier) if earlier is not None else None
        blocks(a_matrix, b_matrix, start, sums_matrix(c_out))
        return
    sums = panel(layout.padded_m * layout.padded_n * SUM_BYTES)
    blocks(a_matrix, b_matrix, None, Matrix(address(sums), layout.padded_n * SUM_BYTES))
    write_back(typed(sums, ir.Type.parse(layout.sums), SUM_BYTES), earlier, c_out, layout)


def unit_columns(matrix: ir.Value, operand) -> ir.Value:
    """The matrix as a view whose columns are next to each other, which vector and tile loads need: itself
    where they are (checked at run time: a view of a row-major argument), else a row-major copy (x @ W^T's
    transposed W)."""
    rows_type = operand.memref_type(unit_columns=True)
    unit = arith.CmpIOp(arith.CmpIPredicate.eq, memref.ExtractStridedMetadataOp(matrix).strides[1], im.const(1)).result
    branch = scf.IfOp(unit, [rows_type], has_else=True)
    with ir.InsertionPoint(branch.then_block):
        scf.YieldOp([memref.CastOp(rows_type, matrix).result])
    with ir.InsertionPoint(branch.else_block):
        size = operand.rows * operand.cols * (1 if operand.element == "i8" else 2)
        alloc = memref.AllocaOp if size <= STACK_PANEL_BYTES else memref.AllocOp
        copy = alloc(operand.memref_type(contiguous=True), [], [], alignment=ALIGNMENT).result
        memref.CopyOp(matrix, copy)
        scf.YieldOp([memref.CastOp(rows_type, copy).result])
    return branch.results[0]


def sums_matrix(buffer: ir.Value) -> Matrix:
    """C (32-bit sums) as a Matrix: a row-major buffer of its own, or a view of a larger matrix (the
    destination a carried accumulator is kept in, compiler/carried_products.py)."""
    ty = ir.MemRefType(buffer.type)
    strides, offset = ty.get_strides_and_offset()
    if offset == 0 and strides == [ty.shape[1], 1]:
        return Matrix(address(buffer), ty.shape[1] * SUM_BYTES)
    return view(buffer, SUM_BYTES)


def address(buffer: ir.Value) -> ir.Value:
    return memref.ExtractAlignedPointerAsIndexOp(buffer).result


def view(matrix: ir.Value, element_bytes: int) -> Matrix:
    """A view of a matrix (any offset and row stride) as a Matrix."""
    meta = memref.ExtractStridedMetadataOp(matrix)
    base = memref.ExtractAlignedPointerAsIndexOp(meta.base_buffer).result
    return Matrix(add(base, mul(meta.offset, element_bytes)), mul(meta.strides[0], element_bytes))


def panel(size: int) -> ir.Value:
    alloc = memref.AllocaOp if size <= STACK_PANEL_BYTES else memref.AllocOp
    return alloc(ir.MemRefType.get([size], ir.IntegerType.get_signless(8)), [], [], alignment=ALIGNMENT).result


def typed(buffer: ir.Value, element: ir.Type, element_bytes: int) -> ir.Value:
    """A byte buffer as elements of `element` (a view: memref.view, offset 0)."""
    size = ir.MemRefType(buffer.type).shape[0] // element_bytes
    return memref.ViewOp(ir.MemRefType.get([size], element), buffer, im.const(0), []).result


def zero_vector(vtype: ir.VectorType) -> ir.Value:
    element = vtype.element_type
    zero = ir.IntegerAttr.get(element, 0) if isinstance(element, ir.IntegerType) else ir.FloatAttr.get(element, 0.0)
    return arith.ConstantOp(vtype, ir.DenseElementsAttr.get_splat(vtype, zero)).result


def first_lanes(lanes: int, count: ir.Value) -> ir.Value:
    """The mask of the lanes below `count` (an index; negative or past `lanes` gives none or all). A compare
    of constant lane numbers: the lowering has no pattern for a vector.create_mask of a run-time count."""
    i32 = ir.IntegerType.get_signless(32)
    vtype = ir.VectorType.get([lanes], i32)
    numbers = arith.ConstantOp(vtype, ir.DenseElementsAttr.get([ir.IntegerAttr.get(i32, p) for p in range(lanes)],
                                                                 vtype)).result
    bound = vector.BroadcastOp(vtype, arith.IndexCastOp(i32, count).result).result
    return arith.CmpIOp(arith.CmpIPredicate.slt, numbers, bound).result


def read(source, row, col, length: int, left: Optional[int]) -> ir.Value:
    """`length` elements of a row-major matrix from (row, col): all of them inside it (left None), or only the
    first `left` (a masked load, zeros past them: the matrix's last columns)."""
    vtype = ir.VectorType.get([length], ir.MemRefType(source.type).element_type)
    indices = [im.as_value(row), im.as_value(col)]
    if left is None:
        return vector.LoadOp(vtype, source, indices).result
    return vector.MaskedLoadOp(vtype, source, indices, first_lanes(length, im.const(left)), zero_vector(vtype)).result


def store(values: ir.Value, buffer: ir.Value, indices: list) -> None:
    vector.StoreOp(values, buffer, [im.as_value(x) for x in indices])


def store_scalar(value: ir.Value, buffer: ir.Value, indices: list) -> None:
    memref.StoreOp(value, buffer, [im.as_value(x) for x in indices])


def pack_a(ap, a, layout: Layout) -> None:
    """A as a row-major padded_m x a_row matrix: zeros past K and in the rows past M; 64 bytes at a time."""
    element = ir.MemRefType(a.type).element_type
    step = 64 // layout.bytes
    padded = typed(ap, element, layout.bytes)
    whole, left, row = layout.k // step, layout.k % step, layout.a_row

    def copy_row(r, _):
        loop(0, whole, 1, lambda t, _: store(read(a, r, mul(t, step), step, None), padded, [add(mul(r, row), mul(t, step))]))
        if left:
            store(read(a, r, whole * step, step, left), padded, [add(mul(r, row), whole * step)])
        for x in range(ceil(layout.k, step), row // step):          # whole zero vectors up to the row's end
            store(zero_vector(ir.VectorType.get([step], element)), padded, [add(mul(r, row), x * step)])
    loop(0, layout.m, 1, copy_row)
    if layout.m < layout.padded_m:
        zeros = zero_vector(ir.VectorType.get([step], element))
        loop(layout.m * row // step, layout.padded_m * row // step, 1, lambda x, _: store(zeros, padded, [mul(x, step)]))


def pack_b(at, b, layout: Layout, flip_sign: bool = False) -> None:
    """B in VNNI rows at address `at` (an index), a padded_k / G x padded_n G matrix: row q holds, column
    after column, B's rows G q .. G q + G - 1; zeros past K and N. 16 columns at a time: G rows of 16
    interleaved into one 64-byte vector. `flip_sign`: int8 values XOR 0x80 (B + 128 as unsigned bytes;
    padding stays zero). Stored through a pointer, as the panel may be the runtime's (kept_panels.py)."""
    element = ir.MemRefType(b.type).element_type
    padded, g = _Bytes(i64(at), layout.bytes), layout.group
    row = layout.padded_n * g
    whole_n, n_left = layout.n // LANES, layout.n % LANES
    zeros = zero_vector(ir.VectorType.get([LANES], element))
    wide = zero_vector(ir.VectorType.get([LANES * g], element))

    def chunk(q, j, col_left, rows_left):
        """Columns 16 j .. 16 j + 15 of VNNI row q; rows_left: B's rows the group has (None: all G)."""
        rows = [zeros if rows_left is not None and x >= rows_left else
                _flipped(read(b, add(mul(q, g), x), mul(j, LANES), LANES, col_left), flip_sign, col_left)
                for x in range(g)]
        padded.store(interleave(rows), [add(mul(q, row), mul(j, LANES * g))])

    def vnni_row(q, rows_left):
        loop(0, whole_n, 1, lambda j, _: chunk(q, j, None, rows_left))
        if n_left:
            chunk(q, whole_n, n_left, rows_left)
        empty = ceil(layout.n, LANES)
        if empty * LANES < layout.padded_n:
            loop(empty, layout.padded_n // LANES, 1, lambda j, _: padded.store(wide, [add(mul(q, row), mul(j, LANES * g))]))

    whole_groups, rows_left = layout.k // g, layout.k % g
    loop(0, whole_groups, 1, lambda q, _: vnni_row(q, None))
    if rows_left:
        vnni_row(im.const(whole_groups), rows_left)
    filled = ceil(layout.k, g)
    if filled * g < layout.padded_k:
        loop(filled * row // (LANES * g), layout.padded_k // g * row // (LANES * g), 1,
             lambda x, _: padded.store(wide, [mul(x, LANES * g)]))


@dataclass(frozen=True)
class _Bytes:
    """A buffer at an address (i64) that vectors are stored into by element index."""
    address: ir.Value
    element_bytes: int

    def store(self, values: ir.Value, indices: list) -> None:
        (index,) = indices
        # alignment 1: LLVM would otherwise take a vector store to be aligned to its whole size
        llvm.StoreOp(values, pointer(self.address, mul(index, self.element_bytes)), alignment=1)


def _flipped(values: ir.Value, flip: bool, col_left) -> ir.Value:
    """values XOR 0x80 where `flip` (only the lanes below col_left, when given: the rest stay zero)."""
    if not flip:
        return values
    i8 = ir.IntegerType.get_signless(8)
    vtype = ir.VectorType(values.type)
    lanes = vtype.shape[0]
    signs = [-128 if col_left is None or p < col_left else 0 for p in range(lanes)]
    mask = arith.ConstantOp(vtype, ir.DenseElementsAttr.get([ir.IntegerAttr.get(i8, v) for v in signs], vtype)).result
    return arith.XOrIOp(values, mask).result


def interleave(rows: list) -> ir.Value:
    """One vector whose lanes are rows[0][0], rows[1][0], ..., rows[G-1][0], rows[0][1], ...: pairs of
    vectors interleaved element by element, then the pairs' results two elements at a time (G = 4)."""
    chunk = 1
    while len(rows) > 1:
        rows = [_interleave_two(rows[i], rows[i + 1], chunk) for i in range(0, len(rows), 2)]
        chunk *= 2
    return rows[0]


def _interleave_two(x: ir.Value, y: ir.Value, chunk: int) -> ir.Value:
    """x's and y's lanes `chunk` at a time, x's first: one vector.shuffle."""
    lanes = ir.VectorType(x.type).shape[0]
    mask = []
    for p in range(2 * lanes):
        block, within = divmod(p, 2 * chunk)
        mask.append(block * chunk + within if within < chunk else lanes + block * chunk + within - chunk)
    return vector.ShuffleOp(x, y, mask).result


def write_back(sums, earlier, c_out, layout: Layout) -> None:
    """C_out (+)= the padded sums, a row of 16 at a time (columns past N masked). `earlier`: the matrix the
    product is added to (C_in, or C_out itself in place), or None."""
    sums_type = ir.MemRefType(sums.type).element_type
    vtype = ir.VectorType.get([LANES], sums_type)
    adder = arith.AddIOp if isinstance(sums_type, ir.IntegerType) else arith.AddFOp
    whole_n, n_left = layout.n // LANES, layout.n % LANES

    def row(y, _):
        def chunk(j, left):
            values = vector.LoadOp(vtype, sums, [im.as_value(add(mul(y, layout.padded_n), mul(j, LANES)))]).result
            _store_row(values, earlier, c_out, y, mul(j, LANES), left, adder)
        loop(0, whole_n, 1, lambda j, _: chunk(j, None))
        if n_left:
            chunk(whole_n, n_left)
    loop(0, layout.m, 1, row)


def _store_row(values, earlier, c_out, row, col, left, adder) -> None:
    """C_out[row][col : col + 16] = values (+ earlier's); only the first `left` columns when not None."""
    indices = [im.as_value(row), im.as_value(col)]
    if left is None:
        if earlier is not None:
            values = adder(values, vector.LoadOp(values.type, earlier, indices).result).result
        vector.StoreOp(values, c_out, indices)
        return
    mask = first_lanes(LANES, im.const(left))
    if earlier is not None:
        values = adder(values, vector.MaskedLoadOp(values.type, earlier, indices, mask, zero_vector(values.type)).result).result
    vector.MaskedStoreOp(c_out, indices, mask, values)


def i64(index) -> ir.Value:
    return arith.IndexCastOp(ir.IntegerType.get_signless(64), im.as_value(index)).result


def pointer(address_i64: ir.Value, offset) -> ir.Value:
    """address (i64) + offset (index) as an LLVM pointer."""
    return llvm.IntToPtrOp(ir.Type.parse("!llvm.ptr"), arith.AddIOp(address_i64, i64(offset)).result).result


def defines(module_body: ir.Block, name: str) -> bool:
    return named(module_body, name) is not None


def internal_function(module_body: ir.Block, name: str, inputs: list, result: Optional[ir.Type] = None) -> ir.Block:
    """A new `llvm.func internal @name` taking `inputs` (types) and returning `result` (None: nothing), at the
    top of the module; returns its entry block, whose arguments are the inputs. The register blocks and
    their helpers are such functions: buffer deallocation leaves llvm.func alone (amx_matmul.py)."""
    signature = f"!llvm.func<{result if result is not None else 'void'} ({', '.join(str(t) for t in inputs)})>"
    with ir.InsertionPoint.at_block_begin(module_body), ir.Location.unknown():
        fn = llvm.LLVMFuncOp(name, ir.TypeAttr.get(ir.Type.parse(signature)),
                             linkage=ir.Attribute.parse("#llvm.linkage<internal>"))
        return fn.body.blocks.append(*inputs)
