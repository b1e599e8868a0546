"""The packed matmul on Intel's AMX tiles (spine/microkernels.py's "amx"): int8 x int8 -> int32 (`tdpbssd`) and
bf16 x bf16 -> fp32 (`tdpbf16ps`), emitted as one private function per operand layout with the same arguments
as smt_microkernel.py's: C (+)= A @ B.

A tile register holds 16 rows of 64 bytes. `tdpbssd c, a, b` adds A.B of a 16x64 int8 tile of A (row-major)
and a 64x16 tile of B into a 16x16 int32 tile of C; B's tile is stored in groups of 4 k: its row q holds,
column after column, B[4q .. 4q+3][col] (Intel's "VNNI" layout). bf16 is the same with 32 k per tile (KT)
and pairs (G = 2). Every operand is a "tile matrix": tile (x, y) starts 16 * x rows and 64 * y bytes in.

    A   read where it is (any row stride) when M fills whole register blocks and K whole tiles, else
        copied into a zero-padded row-major matrix
    B   packed into VNNI rows: row q = B's rows G q .. G q + G - 1 interleaved, zeros past K and N
    C   loaded (an accumulator) and stored where it is when it is made of whole blocks, else computed
        in a padded matrix whose rows are added to C afterwards (masked past N)
    for j over pairs of B's tile columns (32 columns: 2 KiB of B per k tile, in L1 across the row blocks):
        for i over pairs of A's tile rows (32 rows):
            acc[2][2] = C's tiles, or zero                 4 of the 8 tile registers
            for t over k tiles:
                a[r] = A tile (2i + r, t); b[s] = B tile (t, 2j + s)   4 tile loads (the other 4 registers)
                acc[r][s] += a[r] . b[s]                   4 tdpbssd: 65,536 int8 products
            C's tiles = acc

Why LLVM's AMX intrinsics (`llvm.x86.*.internal`, through llvm.call_intrinsic): they take each tile's shape as
an operand, and LLVM writes the tile configuration (`ldtilecfg`) and allocates the tile registers itself,
keeping the accumulators in them across the k loop. MLIR's amx dialect says the same, but its Python
bindings are not built.

bf16 on AMX flushes subnormal inputs and results to zero and rounds each tile's sums of pairs once
(Intel SDM, TDPBF16PS), where the FMA kernel rounds after every product: last-bit differences, and zero for
sums below fp32's normal range. Linux gives a process the 8 KiB tile state only once it asks
(arch_prctl ARCH_REQ_XCOMP_PERM): the kernel asks before its first tile instruction (_request_tiles)."""
from __future__ import annotations

from dataclasses import dataclass

from mlir import ir
from mlir.dialects import arith, func, llvm, memref, scf, vector

from . import index_math as im
from .smt_microkernel import ALIGNMENT, STACK_PANEL_BYTES, PackedMatmul, _function
from .smt_panels import add, loop, mul

ROWS = 16            # rows of every tile; columns of a C tile (16 sums of 32 bits make a 64-byte row)
ROW_BYTES = 64
BLOCK = 2            # C tiles per register block along M and along N
TILE_BYTES = ROWS * ROW_BYTES
PERMISSION_FUNCTION = "spine_amx_request_tiles"
# Linux x86: arch_prctl's number, ARCH_REQ_XCOMP_PERM and the tile data's state component (XTILEDATA)
SYS_ARCH_PRCTL, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA = 158, 0x1023, 18


@dataclass(frozen=True)
class _Types:
    """One product's element and sum types and the tile shapes they give."""
    element: str       # "i8" or "bf16"
    sums: str          # "i32" or "f32"
    intrinsic: str

    @property
    def bytes(self) -> int:
        return 1 if self.element == "i8" else 2

    @property
    def k_per_tile(self) -> int:
        return ROW_BYTES // self.bytes

    @property
    def group(self) -> int:
        """k steps that lie next to each other in a row of B's tile."""
        return 4 // self.bytes


TYPES = {("i8", "i32"): _Types("i8", "i32", "llvm.x86.tdpbssd.internal"),
         ("bf16", "f32"): _Types("bf16", "f32", "llvm.x86.tdpbf16ps.internal")}


VIEWS = True      # A and B may be views of larger matrices (any strides)


def supports(spec: PackedMatmul) -> bool:
    """Whether this emitter computes `spec`: int8 products summed in int32 or bf16 in fp32, C of the sums'
    type, plain row-major matrices (smt's packed tiles go through the FMA kernel), B packed by each call,
    no row bound."""
    operands = [spec.a, spec.b, spec.c_out] + ([spec.c_in] if spec.c_in else [])
    return (spec.a.element == spec.b.element and (spec.a.element, spec.accumulator) in TYPES
            and all(x.element == spec.accumulator for x in operands[2:])
            and not any(x.packed for x in operands) and not spec.b_panels and not spec.row_bound
            and not spec.strided_out)


def define(module_body: ir.Block, spec: PackedMatmul) -> None:
    """Adds `func.func private @<spec.name>(a, b, [c_in,] c_out)`: a and b with any strides (views of the
    kernel's arguments: tile loads read A in place where its columns have unit stride), c_in and c_out
    row-major buffers (c_out the caller's, or, in place, the accumulator); and the register block's
    function and the request for the tile state."""
    shape = _Shape(spec.a.rows, spec.b.cols, spec.a.cols, TYPES[spec.a.element, spec.accumulator])
    _request_tiles(module_body)
    inputs = [spec.a.memref_type(), spec.b.memref_type()]
    inputs += [spec.c_in.memref_type(True)] if spec.c_in else []
    inputs.append(spec.c_out.memref_type(contiguous=True))
    _, entry = _function(module_body, spec.name, inputs)
    with ir.InsertionPoint(entry), ir.Location.unknown():
        args = list(entry.arguments)
        llvm.CallOp(None, [], [], [], callee=ir.FlatSymbolRefAttr.get(PERMISSION_FUNCTION))
        a, b = (_unit_columns(x, o) for x, o in ((args[0], spec.a), (args[1], spec.b)))
        _body(module_body, spec, shape, a, b, args[2] if spec.c_in else None, args[-1])
        func.ReturnOp([])


def _unit_columns(matrix: ir.Value, operand) -> ir.Value:
    """The matrix as a view whose columns are next to each other, which tile loads and vector loads need:
    itself where they are (checked at run time: a view of a row-major argument), else a row-major copy
    (x @ W^T's transposed W)."""
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


def _ceil(x: int, d: int) -> int:
    return -(-x // d)


@dataclass(frozen=True)
class _Shape:
    m: int
    n: int
    k: int
    types: _Types

    @property
    def k_tiles(self) -> int:
        return _ceil(self.k, self.types.k_per_tile)

    @property
    def padded_m(self) -> int:
        return _ceil(self.m, ROWS * BLOCK) * ROWS * BLOCK

    @property
    def padded_n(self) -> int:
        return _ceil(self.n, ROWS * BLOCK) * ROWS * BLOCK

    @property
    def padded_k(self) -> int:
        return self.k_tiles * self.types.k_per_tile

    @property
    def a_in_place(self) -> bool:
        """Whether A's tiles are read where A is: its rows fill whole register blocks and its k whole tiles."""
        return self.m == self.padded_m and self.k == self.padded_k

    @property
    def c_in_place(self) -> bool:
        """Whether C's tiles are loaded and stored where C is: it is made of whole register blocks."""
        return self.m == self.padded_m and self.n == self.padded_n


@dataclass(frozen=True)
class _Matrix:
    """Where a register block finds a matrix's tiles: tile (x, y), 16 rows of 64 bytes, starts at
    address + 16 * x * row_bytes + 64 * y."""
    address: ir.Value         # index
    row_bytes: object         # an int, or an index value (a view's row stride)


def _body(module_body, spec: PackedMatmul, shape: _Shape, a, b, c_in, c_out) -> None:
    """A (padded unless read in place) and B (packed) as tile matrices; C's blocks computed where C is, or in
    a padded copy whose rows are then written back."""
    types = shape.types
    if shape.a_in_place:
        a_tiles = _view(a, types.bytes)
    else:
        ap = _panel(shape.padded_m * shape.padded_k * types.bytes)
        _pack_a(ap, a, shape)
        a_tiles = _Matrix(_address(ap), shape.padded_k * types.bytes)
    bp = _panel(shape.padded_k * shape.padded_n * types.bytes)
    _pack_b(bp, b, shape)
    b_tiles = _Matrix(_address(bp), shape.padded_n * 4)       # a VNNI row: G elements of each column
    earlier = c_in if c_in is not None else c_out if spec.in_place else None
    if shape.c_in_place:
        out = _Matrix(_address(c_out), shape.n * 4)
        start = _Matrix(_address(earlier), shape.n * 4) if earlier is not None else None
        _blocks(module_body, shape, a_tiles, b_tiles, start, out)
        return
    sums = _panel(shape.padded_m * shape.padded_n * 4)
    out = _Matrix(_address(sums), shape.padded_n * 4)
    _blocks(module_body, shape, a_tiles, b_tiles, None, out)
    _write_back(_typed(sums, ir.Type.parse(types.sums), 4), earlier, c_out, shape)


def _address(buffer: ir.Value) -> ir.Value:
    return memref.ExtractAlignedPointerAsIndexOp(buffer).result


def _view(matrix: ir.Value, element_bytes: int) -> _Matrix:
    """A view of a matrix (any offset and row stride) as a tile matrix."""
    meta = memref.ExtractStridedMetadataOp(matrix)
    base = memref.ExtractAlignedPointerAsIndexOp(meta.base_buffer).result
    return _Matrix(add(base, mul(meta.offset, element_bytes)), mul(meta.strides[0], element_bytes))


def _blocks(module_body, shape: _Shape, a: _Matrix, b: _Matrix, start, out: _Matrix) -> None:
    """Every register block of C: B's column pairs outermost (their tiles stay in L1 across A's row pairs)."""
    name = _define_block(module_body, shape, start is not None)
    block_rows = BLOCK * ROWS
    matrices = [a, b, out] + ([start] if start is not None else [])
    strides = [_i64(m.row_bytes) for m in matrices]

    def column_block(j, _):
        def row_block(i, _):
            blocks = [(i, 0), (0, j), (i, j), (i, j)]       # each matrix's block, in rows and columns of blocks
            addresses = [add(m.address, mul(mul(y, block_rows), m.row_bytes), mul(x, BLOCK * ROW_BYTES))
                         for m, (y, x) in zip(matrices, blocks)]
            llvm.CallOp(None, [_i64(x) for x in addresses] + strides, [], [], callee=ir.FlatSymbolRefAttr.get(name))
        loop(0, shape.padded_m // block_rows, 1, row_block)
    loop(0, shape.padded_n // block_rows, 1, column_block)


def _panel(size: int) -> ir.Value:
    alloc = memref.AllocaOp if size <= STACK_PANEL_BYTES else memref.AllocOp
    return alloc(ir.MemRefType.get([size], ir.IntegerType.get_signless(8)), [], [], alignment=ALIGNMENT).result


def _typed(panel: ir.Value, element: ir.Type, element_bytes: int) -> ir.Value:
    """The byte panel as elements of `element` (a view: memref.view, offset 0)."""
    size = ir.MemRefType(panel.type).shape[0] // element_bytes
    return memref.ViewOp(ir.MemRefType.get([size], element), panel, im.const(0), []).result


def _zero_vector(vtype: ir.VectorType) -> ir.Value:
    element = vtype.element_type
    zero = ir.IntegerAttr.get(element, 0) if isinstance(element, ir.IntegerType) else ir.FloatAttr.get(element, 0.0)
    return arith.ConstantOp(vtype, ir.DenseElementsAttr.get_splat(vtype, zero)).result


def _first_lanes(lanes: int, count: ir.Value) -> ir.Value:
    """The mask of the lanes below `count` (an index; negative or past `lanes` gives none or all). A compare
    of constant lane numbers: the lowering has no pattern for a vector.create_mask of a run-time count."""
    i32 = ir.IntegerType.get_signless(32)
    vtype = ir.VectorType.get([lanes], i32)
    numbers = arith.ConstantOp(vtype, ir.DenseElementsAttr.get([ir.IntegerAttr.get(i32, p) for p in range(lanes)],
                                                                 vtype)).result
    bound = vector.BroadcastOp(vtype, arith.IndexCastOp(i32, count).result).result
    return arith.CmpIOp(arith.CmpIPredicate.slt, numbers, bound).result


def _read(source, row, col, length: int, left: int | None) -> ir.Value:
    """`length` elements of a row-major matrix from (row, col): all of them inside it (left None), or only the
    first `left` (a masked load, zeros past them: the matrix's last columns)."""
    vtype = ir.VectorType.get([length], ir.MemRefType(source.type).element_type)
    indices = [im.as_value(row), im.as_value(col)]
    if left is None:
        return vector.LoadOp(vtype, source, indices).result
    return vector.MaskedLoadOp(vtype, source, indices, _first_lanes(length, im.const(left)), _zero_vector(vtype)).result


def _store(values: ir.Value, panel: ir.Value, indices: list) -> None:
    vector.StoreOp(values, panel, [im.as_value(x) for x in indices])


def _pack_a(ap, a, shape: _Shape) -> None:
    """A as a row-major padded_m x padded_k matrix: zeros past K and in the rows past M."""
    element = ir.MemRefType(a.type).element_type
    panel, kt = _typed(ap, element, shape.types.bytes), shape.types.k_per_tile
    whole_k, k_left, row = shape.k // kt, shape.k % kt, shape.padded_k

    def copy_row(r, _):
        loop(0, whole_k, 1, lambda t, _: _store(_read(a, r, mul(t, kt), kt, None), panel, [add(mul(r, row), mul(t, kt))]))
        if k_left:
            _store(_read(a, r, whole_k * kt, kt, k_left), panel, [add(mul(r, row), whole_k * kt)])
    loop(0, shape.m, 1, copy_row)
    if shape.m < shape.padded_m:
        zeros = _zero_vector(ir.VectorType.get([kt], element))
        loop(shape.m * row // kt, shape.padded_m * row // kt, 1, lambda x, _: _store(zeros, panel, [mul(x, kt)]))


def _pack_b(bp, b, shape: _Shape) -> None:
    """B in VNNI rows, a padded_k / G x padded_n G matrix: row q holds, column after column, B's rows G q ..
    G q + G - 1; zeros past K and N. 16 columns at a time: G rows of 16 interleaved into one 64-byte vector."""
    element = ir.MemRefType(b.type).element_type
    panel, g = _typed(bp, element, shape.types.bytes), shape.types.group
    row = shape.padded_n * g
    whole_n, n_left = shape.n // ROWS, shape.n % ROWS
    zeros = _zero_vector(ir.VectorType.get([ROWS], element))

    def chunk(q, j, col_left, rows_left):
        """Columns 16 j .. 16 j + 15 of VNNI row q; rows_left: B's rows the group has (None: all G)."""
        rows = [zeros if rows_left is not None and x >= rows_left else
                _read(b, add(mul(q, g), x), mul(j, ROWS), ROWS, col_left) for x in range(g)]
        _store(_interleave(rows), panel, [add(mul(q, row), mul(j, ROWS * g))])

    def vnni_row(q, rows_left):
        loop(0, whole_n, 1, lambda j, _: chunk(q, j, None, rows_left))
        if n_left:
            chunk(q, whole_n, n_left, rows_left)
        empty = _ceil(shape.n, ROWS)
        if empty * ROWS < shape.padded_n:
            wide = _zero_vector(ir.VectorType.get([ROWS * g], element))
            loop(empty, shape.padded_n // ROWS, 1, lambda j, _: _store(wide, panel, [add(mul(q, row), mul(j, ROWS * g))]))

    whole_groups, rows_left = shape.k // g, shape.k % g
    loop(0, whole_groups, 1, lambda q, _: vnni_row(q, None))
    if rows_left:
        vnni_row(im.const(whole_groups), rows_left)
    filled = _ceil(shape.k, g)
    if filled * g < shape.padded_k:
        wide = _zero_vector(ir.VectorType.get([ROWS * g], element))
        loop(filled * row // (ROWS * g), shape.padded_k // g * row // (ROWS * g), 1,
             lambda x, _: _store(wide, panel, [mul(x, ROWS * g)]))


def _interleave(rows: list) -> ir.Value:
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


def _i16(value: int) -> ir.Value:
    return arith.ConstantOp(ir.IntegerType.get_signless(16), value).result


def _i64(index) -> ir.Value:
    return arith.IndexCastOp(ir.IntegerType.get_signless(64), im.as_value(index)).result


def _define_block(module_body: ir.Block, shape: _Shape, accumulates: bool) -> str:
    """`llvm.func internal @spine_amx_block_<element>_k<k tiles>[_acc](a, b, c, [start,] a_row, b_row, c_row
    [, start_row])`, i64 addresses and the bytes between their rows: one register block, C's 2 x 2 tiles =
    start's (`accumulates`; else zero) + A's 2 tile rows times B's 2 tile columns over every k tile. An
    LLVM-dialect function of its own because the tile intrinsics (llvm.call_intrinsic) declare no memory
    effects, which buffer deallocation refuses in the functions it reads (func.func); it leaves llvm.func
    alone. Its one caller inlines it. Returns its name."""
    name = f"spine_amx_block_{shape.types.element}_k{shape.k_tiles}" + ("_acc" if accumulates else "")
    if any(_symbol(op) == name for op in module_body.operations):
        return name
    i64 = ir.IntegerType.get_signless(64)
    count = 2 * (4 if accumulates else 3)
    with ir.InsertionPoint.at_block_begin(module_body), ir.Location.unknown():
        fn = llvm.LLVMFuncOp(name, ir.TypeAttr.get(ir.Type.parse(f"!llvm.func<void ({', '.join(['i64'] * count)})>")),
                             linkage=ir.Attribute.parse("#llvm.linkage<internal>"))
        entry = fn.body.blocks.append(*[i64] * count)
    with ir.InsertionPoint(entry), ir.Location.unknown():
        half = count // 2
        (a, b, c), (a_row, b_row, c_row) = entry.arguments[:3], entry.arguments[half:half + 3]
        tile = ir.Type.parse("!llvm.x86_amx")
        rows, row_bytes = _i16(ROWS), _i16(ROW_BYTES)

        def at(base, row, x, y):
            """Tile (x, y) of the tile matrix at `base` whose rows are `row` bytes apart (i64): its pointer."""
            down = arith.MulIOp(row, _i64(mul(x, ROWS))).result
            offset = arith.AddIOp(down, _i64(mul(y, ROW_BYTES))).result
            return llvm.IntToPtrOp(ir.Type.parse("!llvm.ptr"), arith.AddIOp(base, offset).result).result

        def load(base, row, x, y):
            return llvm.call_intrinsic(tile, "llvm.x86.tileloadd64.internal", [rows, row_bytes, at(base, row, x, y), row],
                                       [], [])

        if not accumulates:
            first = [llvm.call_intrinsic(tile, "llvm.x86.tilezero.internal", [rows, row_bytes], [], [])] * (BLOCK * BLOCK)
        else:
            start, start_row = entry.arguments[3], entry.arguments[half + 3]
            first = [load(start, start_row, r, s) for r in range(BLOCK) for s in range(BLOCK)]

        def step(t, accs):
            a_tiles = [load(a, a_row, r, t) for r in range(BLOCK)]
            b_tiles = [load(b, b_row, t, s) for s in range(BLOCK)]
            return [llvm.call_intrinsic(tile, shape.types.intrinsic,
                                        [rows, row_bytes, row_bytes, accs[r * BLOCK + s], a_tiles[r], b_tiles[s]], [], [])
                    for r in range(BLOCK) for s in range(BLOCK)]
        accs = loop(0, shape.k_tiles, 1, step, first)
        for r in range(BLOCK):
            for s in range(BLOCK):
                llvm.call_intrinsic(None, "llvm.x86.tilestored64.internal",
                                    [rows, row_bytes, at(c, c_row, r, s), c_row, accs[r * BLOCK + s]], [], [])
        llvm.ReturnOp()
    return name


def _write_back(sums, earlier, c_out, shape: _Shape) -> None:
    """C_out (+)= the padded sums, a row of 16 at a time (columns past N masked). `earlier`: the matrix the
    product is added to (C_in, or C_out itself in place), or None."""
    sums_type = ir.MemRefType(sums.type).element_type
    vtype = ir.VectorType.get([ROWS], sums_type)
    adder = arith.AddIOp if isinstance(sums_type, ir.IntegerType) else arith.AddFOp
    whole_n, n_left = shape.n // ROWS, shape.n % ROWS

    def row(y, _):
        def chunk(j, left):
            values = vector.LoadOp(vtype, sums, [im.as_value(add(mul(y, shape.padded_n), mul(j, ROWS)))]).result
            _store_row(values, earlier, c_out, y, mul(j, ROWS), left, adder)
        loop(0, whole_n, 1, lambda j, _: chunk(j, None))
        if n_left:
            chunk(whole_n, n_left)
    loop(0, shape.m, 1, row)


def _store_row(values, earlier, c_out, row, col, left, adder) -> None:
    """C_out[row][col : col + 16] = values (+ earlier's); only the first `left` columns when not None."""
    indices = [im.as_value(row), im.as_value(col)]
    if left is None:
        if earlier is not None:
            values = adder(values, vector.LoadOp(values.type, earlier, indices).result).result
        vector.StoreOp(values, c_out, indices)
        return
    mask = _first_lanes(ROWS, im.const(left))
    if earlier is not None:
        values = adder(values, vector.MaskedLoadOp(values.type, earlier, indices, mask, _zero_vector(values.type)).result).result
    vector.MaskedStoreOp(c_out, indices, mask, values)


def _request_tiles(module_body: ir.Block) -> None:
    """`llvm.func internal @spine_amx_request_tiles()`, which asks Linux for the tile state the first time it
    runs: syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA), then a flag (a global of the
    kernel's) says it was done. Every AMX matmul calls it first: a constructor would be surer to run
    before, but LLVM puts constructors into `.ctors`, which nothing runs in a library linked without the C
    runtime's start files. Threads that race through it all ask (the request is idempotent). Its answer is
    not checked: where the CPU has no AMX the kernel faults at its first tile instruction, and the launch
    says so."""
    if any(_symbol(op) == PERMISSION_FUNCTION for op in module_body.operations):
        return
    i8, i64 = ir.IntegerType.get_signless(8), ir.IntegerType.get_signless(64)
    ptr = ir.Type.parse("!llvm.ptr")
    syscall_type = ir.Type.parse("!llvm.func<i64 (i64, ...)>")
    flag = PERMISSION_FUNCTION + "_done"
    internal = ir.Attribute.parse("#llvm.linkage<internal>")
    with ir.InsertionPoint.at_block_begin(module_body), ir.Location.unknown():
        if not any(_symbol(op) == "syscall" for op in module_body.operations):
            llvm.LLVMFuncOp("syscall", ir.TypeAttr.get(syscall_type))
        llvm.GlobalOp(i8, flag, internal, value=ir.IntegerAttr.get(i8, 0))
        request = llvm.LLVMFuncOp(PERMISSION_FUNCTION, ir.TypeAttr.get(ir.Type.parse("!llvm.func<void ()>")),
                                  linkage=internal)
        entry = request.body.blocks.append()
    with ir.InsertionPoint(entry), ir.Location.unknown():
        address = llvm.AddressOfOp(ptr, flag).result
        done = llvm.LoadOp(i8, address).result
        branch = scf.IfOp(arith.CmpIOp(arith.CmpIPredicate.eq, done, arith.ConstantOp(i8, 0).result).result)
        with ir.InsertionPoint(branch.then_block):
            args = [llvm.ConstantOp(i64, ir.IntegerAttr.get(i64, v)).result
                    for v in (SYS_ARCH_PRCTL, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)]
            llvm.CallOp(i64, args, [], [], callee=ir.FlatSymbolRefAttr.get("syscall"),
                        var_callee_type=ir.TypeAttr.get(syscall_type))
            llvm.StoreOp(arith.ConstantOp(i8, 1).result, address)
            scf.YieldOp([])
        llvm.ReturnOp()


def _symbol(op) -> str:
    try:
        return ir.StringAttr(op.attributes["sym_name"]).value
    except KeyError:
        return ""
