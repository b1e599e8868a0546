"""The packed matmul for int8 x int8 -> int32 on K1's matrix unit (IME, `smt.vmadot`: spine/microkernels.py's
"ime"), emitted as one private function per operand layout with the same arguments as smt_microkernel.py's:
C (+)= A @ B over memrefs.

One `smt.vmadot vd, vs1, vs2` adds A.B^T of a 4x8 int8 tile of A (vs1, row-major) and a 4x8 tile of B^T (vs2:
four columns of B, each 8 steps of k) into a 4x4 int32 tile of C (the register pair vd, vd+1, row-major), at
VLEN 256 (SpacemiT's "AI Matrix Extension" v0.6, 5.1). So both operands are packed into such tiles:

    Ap[g][t] = A[4g .. 4g+3][8t .. 8t+7]          32 bytes, row by row (zeros past M and K)
    Bp[h][t] = B[8t .. 8t+7][4h .. 4h+3]^T        32 bytes, column by column (zeros past K and N)
    for h0 over blocks of 4 column tiles (16 columns: a B panel of 16 * K bytes stays in L1):
        for g0 over blocks of 2 row tiles (8 rows):
            acc[2][4] = 0                          8 register pairs: 16 of the 32 vector registers
            for t over k tiles:
                a[i] = Ap[2 g0 + i][t]; b[j] = Bp[4 h0 + j][t]        6 vector loads
                acc[i][j] += smt.vmadot(a[i], b[j])                   8 instructions, 1,024 products
            C block (+)= acc                       a tile by one masked scatter (and gather, to add to C)

Why inline assembly: LLVM 22 assembles the instruction but has no intrinsic or code generation for it. The
assembly names only the instruction (its own vsetvli: the instruction needs LMUL 1); LLVM allocates the
registers and keeps the accumulators in them across the k loop. llvmlite cannot assemble RISC-V inline
assembly, so a module holding it is turned into code by zig's clang (compiler/codegen.py). Under QEMU the
instruction traps and the kernel server carries it out (cpp/matrix_emulation.c)."""
from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, func, llvm, memref, scf, vector

from . import index_math as im
from .smt_microkernel import ALIGNMENT, STACK_PANEL_BYTES, PackedMatmul, _function
from .smt_panels import add, loop, mul

TILE = 4          # rows of an A tile, columns of a B tile, rows and columns of a C tile
STEP = 8          # k per tile
ROW_TILES = 2     # A tiles per register block (8 rows)
COL_TILES = 4     # B tiles per register block (16 columns)
TILE_BYTES = TILE * STEP


VIEWS = False     # A and B are row-major buffers (the packing's gathers read them at constant offsets)


def supports(spec: PackedMatmul) -> bool:
    """Whether this emitter computes `spec`: int8 operands summed in int32, B packed by each call, no row
    bound, C_out the product's own buffer or the accumulator."""
    return (spec.a.element == spec.b.element == "i8" and spec.accumulator == "i32" and not spec.b_panels
            and not spec.row_bound and not spec.strided_out)


def define(module_body: ir.Block, spec: PackedMatmul) -> None:
    """Adds `func.func private @<spec.name>(a, b, [c_in,] c_out)`: a, b and c_in row-major buffers (or
    packed tiles), c_out the caller's buffer (or, in place, the accumulator)."""
    inputs = [spec.a.memref_type(True), spec.b.memref_type(True)] + ([spec.c_in.memref_type(True)] if spec.c_in else [])
    inputs.append(spec.c_out.memref_type(contiguous=True))
    fn, entry = _function(module_body, spec.name, inputs)
    with ir.InsertionPoint(entry), ir.Location.unknown():
        args = list(entry.arguments)
        _body(spec, args[0], args[1], args[2] if spec.c_in else None, args[-1])
        func.ReturnOp([])


def _ceil(x: int, d: int) -> int:
    return -(-x // d)


def _body(spec: PackedMatmul, a, b, c_in, c_out) -> None:
    m, k, n = spec.a.rows, spec.a.cols, spec.b.cols
    k_tiles = _ceil(k, STEP)
    row_blocks, col_blocks = _ceil(m, TILE * ROW_TILES), _ceil(n, TILE * COL_TILES)
    i8 = ir.IntegerType.get_signless(8)
    ap = _panel(row_blocks * ROW_TILES * k_tiles * TILE_BYTES, i8)
    bp = _panel(col_blocks * COL_TILES * k_tiles * TILE_BYTES, i8)
    if spec.a.packed:
        _pack(ap, lambda r, kk: spec.a.at(r, kk), a, m, k, k_tiles, row_blocks * ROW_TILES * TILE)
    else:
        _gather_pack(ap, a, True, m, k, k_tiles, row_blocks * ROW_TILES * TILE)
    if spec.b.packed:
        _pack(bp, lambda c, kk: spec.b.at(kk, c), b, n, k, k_tiles, col_blocks * COL_TILES * TILE)
    else:
        _gather_pack(bp, b, False, n, k, k_tiles, col_blocks * COL_TILES * TILE)

    def column_block(h0, _):
        def row_block(g0, _):
            accs = _products(ap, bp, g0, h0, k_tiles)
            _write_back(spec, accs, c_in, c_out, g0, h0)
        loop(0, row_blocks, 1, row_block)
    loop(0, col_blocks, 1, column_block)


def _panel(elements: int, element: ir.Type) -> ir.Value:
    alloc = memref.AllocaOp if elements <= STACK_PANEL_BYTES else memref.AllocOp
    return alloc(ir.MemRefType.get([elements], element), [], [], alignment=ALIGNMENT).result


def _pack(panel, index, source, extent: int, k: int, k_tiles: int, padded: int) -> None:
    """panel[(x / 4) * k_tiles + kk / 8][x % 4][kk % 8] = source[index(x, kk)] for x < extent, kk < k; zeros
    elsewhere (rows or columns past the matrix, steps past K). Element by element: for packed smt tiles."""
    zero = arith.ConstantOp(ir.IntegerType.get_signless(8), 0).result

    def fill(x, _):
        def step(kk, _):
            inside = arith.AndIOp(arith.CmpIOp(arith.CmpIPredicate.ult, x, im.const(extent)).result,
                                  arith.CmpIOp(arith.CmpIPredicate.ult, kk, im.const(k)).result).result
            # a clamped index keeps the load inside the matrix; select gives the padding its zero
            xs = arith.MinUIOp(x, im.const(extent - 1)).result
            ks = arith.MinUIOp(kk, im.const(k - 1)).result
            value = memref.LoadOp(source, index(xs, ks)).result
            tile = add(mul(arith.DivUIOp(x, im.const(TILE)).result, k_tiles), arith.DivUIOp(kk, im.const(STEP)).result)
            at = add(mul(tile, TILE_BYTES), mul(arith.RemUIOp(x, im.const(TILE)).result, STEP),
                     arith.RemUIOp(kk, im.const(STEP)).result)
            memref.StoreOp(arith.SelectOp(inside, value, zero).result, panel, [at])
        loop(0, k_tiles * STEP, 1, step)
    loop(0, padded, 1, fill)


def _gather_pack(panel, source, rows_are_x: bool, extent: int, k: int, k_tiles: int, padded: int) -> None:
    """_pack for a plain row-major matrix, a tile at a time: one gather of the tile's 32 bytes (RVV's
    indexed load) from fixed offsets, then one store; at the matrix's edges a mask cuts what lies past it
    (those lanes read nothing and are zero). `rows_are_x`: tile rows x run along the matrix's rows (A), else
    along its columns (B, whose tiles hold 4 of its columns)."""
    shape = ir.MemRefType(source.type).shape
    cols = shape[1]
    flat = _flat(source)
    i32 = ir.IntegerType.get_signless(32)
    lanes = list(range(TILE_BYTES))
    # lane p holds tile element (x, kk) = (p / 8, p % 8)
    offsets = [(p // STEP) * cols + p % STEP if rows_are_x else (p % STEP) * cols + p // STEP for p in lanes]
    offset_vector = _constant_vector(offsets, i32)
    x_of_lane, k_of_lane = _constant_vector([p // STEP for p in lanes], i32), _constant_vector([p % STEP for p in lanes], i32)
    tile_type = ir.VectorType.get([TILE_BYTES], ir.IntegerType.get_signless(8))
    zeros = _constant_vector([0] * TILE_BYTES, ir.IntegerType.get_signless(8))

    all_lanes = _constant_vector([1] * TILE_BYTES, ir.IntegerType.get_signless(1))

    def tile(xt, t, masked: bool):
        x0, k0 = mul(xt, TILE), mul(t, STEP)
        mask = all_lanes
        if masked:
            left_x = arith.IndexCastOp(i32, im.as_value(add(im.const(extent), mul(x0, -1)))).result
            left_k = arith.IndexCastOp(i32, im.as_value(add(im.const(k), mul(k0, -1)))).result
            mask = arith.AndIOp(_lanes_below(x_of_lane, left_x), _lanes_below(k_of_lane, left_k)).result
        start = add(mul(x0, cols), k0) if rows_are_x else add(mul(k0, cols), x0)
        values = vector.GatherOp(tile_type, flat, [im.as_value(start)], offset_vector, mask, zeros).result
        vector.StoreOp(values, panel, [_tile_at(xt, t, k_tiles)])

    # The sizes are known here: the tiles wholly inside the matrix (nearly all) need no mask, which LLVM
    # then leaves out (an unmasked indexed load); only the last row and k tiles compute one.
    whole_x, whole_k = extent // TILE, k // STEP
    for x_lo, x_hi in ((0, whole_x), (whole_x, padded // TILE)):
        for k_lo, k_hi in ((0, whole_k), (whole_k, k_tiles)):
            if x_lo < x_hi and k_lo < k_hi:
                _tiles(x_lo, x_hi, k_lo, k_hi, tile, masked=x_lo == whole_x or k_lo == whole_k)


def _tiles(x_lo: int, x_hi: int, k_lo: int, k_hi: int, tile, masked: bool) -> None:
    """tile(xt, t, masked) for the tile rows xt in [x_lo, x_hi) and k tiles t in [k_lo, k_hi), as loops."""
    def row(xt, _):
        loop(k_lo, k_hi, 1, lambda t, _: tile(xt, t, masked))
    loop(x_lo, x_hi, 1, row)


def _constant_vector(values: list, element: ir.Type) -> ir.Value:
    vtype = ir.VectorType.get([len(values)], element)
    return arith.ConstantOp(vtype, ir.DenseElementsAttr.get(
        [ir.IntegerAttr.get(element, v) for v in values], vtype)).result


def _lanes_below(lane_values: ir.Value, bound: ir.Value) -> ir.Value:
    """lane_values[p] < bound (signed: the bound is negative past the matrix)."""
    splat = vector.BroadcastOp(lane_values.type, bound).result
    return arith.CmpIOp(arith.CmpIPredicate.slt, lane_values, splat).result


def _products(ap, bp, g0, h0, k_tiles: int) -> list:
    """The block's 2 x 4 accumulator tiles (vector<16xi32> each, row-major 4x4) over every k tile."""
    acc_type = ir.VectorType.get([TILE * TILE], ir.IntegerType.get_signless(32))
    zeros = arith.ConstantOp(acc_type, ir.DenseElementsAttr.get_splat(
        acc_type, ir.IntegerAttr.get(ir.IntegerType.get_signless(32), 0))).result
    a_base, b_base = (memref.ExtractAlignedPointerAsIndexOp(p).result for p in (ap, bp))

    def step(t, accs):
        a = [add(a_base, _tile_at(add(mul(g0, ROW_TILES), i), t, k_tiles)) for i in range(ROW_TILES)]
        b = [add(b_base, _tile_at(add(mul(h0, COL_TILES), j), t, k_tiles)) for j in range(COL_TILES)]
        return _vmadots(accs, [_address(x) for x in a + b])
    return loop(0, k_tiles, 1, step, [zeros] * (ROW_TILES * COL_TILES))


def _tile_at(tile, t, k_tiles: int) -> ir.Value:
    return im.as_value(mul(add(mul(tile, k_tiles), t), TILE_BYTES))


def _address(index) -> ir.Value:
    return arith.IndexCastOp(ir.IntegerType.get_signless(64), im.as_value(index)).result


def _vmadots(accs: list, tiles: list) -> list:
    """acc[i * 4 + j] += A tile i times B tile j, one smt.vmadot each, in one inline-assembly statement that
    loads the tiles too (from `tiles`, the addresses of A's then B's): the tile registers live only inside
    it, so LLVM can neither hoist the loads of an unrolled k loop nor run out of registers. Operands: $0..$7
    the accumulators, $8..$13 the tile registers (scratch outputs), $14..$21 the accumulators' inputs
    (tied), then the addresses."""
    count, scratch = len(accs), len(tiles)
    first_address = 2 * count + scratch
    lines = ["vsetvli t0, zero, e8, m1"]
    lines += [f"vle8.v ${count + x}, (${first_address + x})" for x in range(scratch)]
    for i in range(ROW_TILES):
        for j in range(COL_TILES):
            lines.append(f"smt.vmadot ${i * COL_TILES + j}, ${count + i}, ${count + ROW_TILES + j}")
    constraints = ",".join(["=&^vr"] * (count + scratch) + [str(x) for x in range(count)] + ["r"] * scratch
                           + ["~{t0}", "~{vl}", "~{vtype}"])
    tile_type = "vector<32xi8>"
    result_type = ir.Type.parse("!llvm.struct<(" + ", ".join(["vector<16xi32>"] * count + [tile_type] * scratch) + ")>")
    # reads memory the packing wrote: a side effect, so that it stays after those stores
    asm = llvm.InlineAsmOp(result_type, accs + tiles, "\n".join(lines), constraints, has_side_effects=True)
    return [llvm.ExtractValueOp(accs[0].type, asm.res, [x]).result for x in range(count)]


def _write_back(spec: PackedMatmul, accs: list, c_in, c_out, g0, h0) -> None:
    """C's block (+)= the accumulator tiles: a tile at a time by a masked scatter of its 16 sums (after a
    masked gather of what they are added to) where C and C_in are plain matrices, else element by
    element. The mask cuts what lies past C's edges."""
    row0, col0 = mul(g0, TILE * ROW_TILES), mul(h0, TILE * COL_TILES)
    if spec.c_out.packed or (spec.c_in is not None and spec.c_in.packed):
        _write_elements(spec, accs, c_in, c_out, row0, col0)
        return
    m, n = spec.a.rows, spec.b.cols
    i32 = ir.IntegerType.get_signless(32)
    lanes = range(TILE * TILE)
    offsets = _constant_vector([(p // TILE) * n + p % TILE for p in lanes], i32)
    row_of_lane, col_of_lane = (_constant_vector([f(p) for p in lanes], i32)
                                for f in (lambda p: p // TILE, lambda p: p % TILE))
    zeros = _constant_vector([0] * (TILE * TILE), i32)
    out, earlier = _flat(c_out), _earlier(spec, c_in, c_out)
    earlier = _flat(earlier) if earlier is not None else None
    for i in range(ROW_TILES):
        for j in range(COL_TILES):
            row, col = add(row0, i * TILE), add(col0, j * TILE)
            left_rows = arith.IndexCastOp(i32, im.as_value(add(im.const(m), mul(row, -1)))).result
            left_cols = arith.IndexCastOp(i32, im.as_value(add(im.const(n), mul(col, -1)))).result
            mask = arith.AndIOp(_lanes_below(row_of_lane, left_rows), _lanes_below(col_of_lane, left_cols)).result
            start = [im.as_value(add(mul(row, n), col))]
            sums = accs[i * COL_TILES + j]
            if earlier is not None:
                before = vector.GatherOp(sums.type, earlier, start, offsets, mask, zeros).result
                sums = arith.AddIOp(sums, before).result
            vector.ScatterOp(None, out, start, offsets, mask, sums)


def _flat(matrix: ir.Value) -> ir.Value:
    """A row-major matrix as one row."""
    mtype = ir.MemRefType(matrix.type)
    rows, cols = mtype.shape
    return memref.CollapseShapeOp(ir.MemRefType.get([rows * cols], mtype.element_type), matrix, [[0, 1]]).result


def _earlier(spec: PackedMatmul, c_in, c_out):
    """The matrix the product is added to: C_in, or C_out itself in place, or None."""
    return c_in if c_in is not None else c_out if spec.in_place else None


def _write_elements(spec, accs, c_in, c_out, row0, col0) -> None:
    """Through a stack copy of the tiles, every element inside C, wherever C and C_in keep it."""
    m, n = spec.a.rows, spec.b.cols
    i32 = ir.IntegerType.get_signless(32)
    tiles = memref.AllocaOp(ir.MemRefType.get([len(accs) * TILE * TILE], i32), [], [], alignment=ALIGNMENT).result
    for x, acc in enumerate(accs):
        vector.StoreOp(acc, tiles, [im.const(x * TILE * TILE)])
    earlier = _earlier(spec, c_in, c_out)
    earlier_layout = spec.c_in if c_in is not None else spec.c_out

    def row(r, _):
        def col(c, _):
            y, x = im.as_value(add(row0, r)), im.as_value(add(col0, c))
            inside = arith.AndIOp(arith.CmpIOp(arith.CmpIPredicate.ult, y, im.const(m)).result,
                                  arith.CmpIOp(arith.CmpIPredicate.ult, x, im.const(n)).result).result
            branch = scf.IfOp(inside)
            with ir.InsertionPoint(branch.then_block):
                tile = add(mul(arith.DivUIOp(r, im.const(TILE)).result, COL_TILES), arith.DivUIOp(c, im.const(TILE)).result)
                at = add(mul(tile, TILE * TILE), mul(arith.RemUIOp(r, im.const(TILE)).result, TILE),
                         arith.RemUIOp(c, im.const(TILE)).result)
                value = memref.LoadOp(tiles, [im.as_value(at)]).result
                if earlier is not None:
                    value = arith.AddIOp(value, memref.LoadOp(earlier, earlier_layout.at(y, x)).result).result
                memref.StoreOp(value, c_out, spec.c_out.at(y, x))
                scf.YieldOp([])
        loop(0, TILE * COL_TILES, 1, col)
    loop(0, TILE * ROW_TILES, 1, row)
