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
            C block (+)= acc                       a whole block by 4-element rows, an edge block by elements

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
    _pack(ap, lambda r, kk: spec.a.at(r, kk), a, m, k, k_tiles, row_blocks * ROW_TILES * TILE)
    _pack(bp, lambda c, kk: spec.b.at(kk, c), b, n, k, k_tiles, col_blocks * COL_TILES * TILE)

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
    elsewhere (rows or columns past the matrix, steps past K)."""
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


def _products(ap, bp, g0, h0, k_tiles: int) -> list:
    """The block's 2 x 4 accumulator tiles (vector<16xi32> each, row-major 4x4) over every k tile."""
    acc_type = ir.VectorType.get([TILE * TILE], ir.IntegerType.get_signless(32))
    tile_type = ir.VectorType.get([TILE_BYTES], ir.IntegerType.get_signless(8))
    zeros = arith.ConstantOp(acc_type, ir.DenseElementsAttr.get_splat(
        acc_type, ir.IntegerAttr.get(ir.IntegerType.get_signless(32), 0))).result

    def step(t, accs):
        a = [vector.LoadOp(tile_type, ap, [_tile_at(add(mul(g0, ROW_TILES), i), t, k_tiles)]).result
             for i in range(ROW_TILES)]
        b = [vector.LoadOp(tile_type, bp, [_tile_at(add(mul(h0, COL_TILES), j), t, k_tiles)]).result
             for j in range(COL_TILES)]
        return _vmadots(accs, a, b)
    return loop(0, k_tiles, 1, step, [zeros] * (ROW_TILES * COL_TILES))


def _tile_at(tile, t, k_tiles: int) -> ir.Value:
    return im.as_value(mul(add(mul(tile, k_tiles), t), TILE_BYTES))


def _vmadots(accs: list, a: list, b: list) -> list:
    """acc[i * 4 + j] += A tile a[i] times B tile b[j], one smt.vmadot each, in one inline-assembly
    statement: outputs $0..$7 tied to the accumulators, then a's and b's registers."""
    count = len(accs)
    lines = ["vsetvli t0, zero, e8, m1"]
    for i in range(ROW_TILES):
        for j in range(COL_TILES):
            lines.append(f"smt.vmadot ${i * COL_TILES + j}, ${2 * count + i}, ${2 * count + ROW_TILES + j}")
    constraints = ",".join(["=&^vr"] * count + [str(x) for x in range(count)] + ["^vr"] * (len(a) + len(b))
                           + ["~{t0}", "~{vl}", "~{vtype}"])
    result_type = ir.Type.parse("!llvm.struct<(" + ", ".join(["vector<16xi32>"] * count) + ")>")
    asm = llvm.InlineAsmOp(result_type, accs + a + b, "\n".join(lines), constraints, has_side_effects=False)
    return [llvm.ExtractValueOp(accs[0].type, asm.res, [x]).result for x in range(count)]


def _write_back(spec: PackedMatmul, accs: list, c_in, c_out, g0, h0) -> None:
    """C's block (+)= the accumulator tiles: by rows of 4 with vector loads and stores where the block lies
    inside C and C and C_in are plain matrices, else element by element."""
    m, n = spec.a.rows, spec.b.cols
    row0, col0 = mul(g0, TILE * ROW_TILES), mul(h0, TILE * COL_TILES)
    plain = not spec.c_out.packed and (spec.c_in is None or not spec.c_in.packed)
    if not plain:
        _write_elements(spec, accs, c_in, c_out, row0, col0)
        return
    whole = arith.AndIOp(
        arith.CmpIOp(arith.CmpIPredicate.ule, im.as_value(add(row0, TILE * ROW_TILES)), im.const(m)).result,
        arith.CmpIOp(arith.CmpIPredicate.ule, im.as_value(add(col0, TILE * COL_TILES)), im.const(n)).result).result
    branch = scf.IfOp(whole, has_else=True)
    with ir.InsertionPoint(branch.then_block):
        _write_rows(spec, accs, c_in, c_out, row0, col0)
        scf.YieldOp([])
    with ir.InsertionPoint(branch.else_block):
        _write_elements(spec, accs, c_in, c_out, row0, col0)
        scf.YieldOp([])


def _earlier(spec: PackedMatmul, c_in, c_out):
    """The matrix the product is added to: C_in, or C_out itself in place, or None."""
    return c_in if c_in is not None else c_out if spec.in_place else None


def _write_rows(spec, accs, c_in, c_out, row0, col0) -> None:
    row_type = ir.VectorType.get([TILE], ir.IntegerType.get_signless(32))
    earlier = _earlier(spec, c_in, c_out)
    for i in range(ROW_TILES):
        for j in range(COL_TILES):
            for r in range(TILE):
                acc = accs[i * COL_TILES + j]
                row = vector.ShuffleOp(acc, acc, list(range(r * TILE, (r + 1) * TILE))).result
                at = [im.as_value(add(row0, i * TILE + r)), im.as_value(add(col0, j * TILE))]
                if earlier is not None:
                    row = arith.AddIOp(row, vector.LoadOp(row_type, earlier, at).result).result
                vector.StoreOp(row, c_out, at)


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
