"""The packed matmul on SpacemiT's matrix units, K1's IME (spine/microkernels.py's "ime": int8 x int8 -> int32)
and K3 A100's ("a100": the same for int8, and fp16 x fp16 -> fp32), emitted as one private function per operand
layout with the same arguments as smt_microkernel.py's: C (+)= A @ B over memrefs.

One instruction adds A.B^T of an R x S tile of A (vs1, row-major) and an R x S tile of B^T (vs2: R columns of
B, each S steps of k) into an R x R tile of C (the register pair vd, vd+1, row-major, 32-bit sums).
SpacemiT's "AI Matrix Extension" v0.6 (5.1, 6.1) gives the shapes (`Geometry` below):

    K1  (VLEN 256)   smt.vmadot     int8   R = 4, S = 8     32-byte tiles
    A100 (VLEN 1024) smt.vmadot     int8   R = 8, S = 16    128-byte tiles
    A100 (VLEN 1024) smt.vfwmadot   fp16   R = 8, S = 8     128-byte tiles, fp32 sums

So both operands are packed into such tiles:

    Ap[g][t] = A[R g .. R g + R-1][S t .. S t + S-1]        row by row (zeros past M and K)
    Bp[h][t] = B[S t .. S t + S-1][R h .. R h + R-1]^T      column by column (zeros past K and N)
    for h0 over blocks of 4 column tiles (a B panel of 4 R * K elements stays in L1):
        for g0 over blocks of 2 row tiles:
            acc[2][4] = 0                          8 register pairs: 16 of the 32 vector registers
            for t over k tiles:
                a[i] = Ap[2 g0 + i][t]; b[j] = Bp[4 h0 + j][t]        6 vector loads
                acc[i][j] += matrix instruction(a[i], b[j])          8 instructions
            C block (+)= acc                       a tile by one masked scatter (and gather, to add to C)

Why inline assembly: LLVM 22 assembles smt.vmadot but has no intrinsic or code generation for it, and knows
nothing of smt.vfwmadot (XSMTVDotII, LLVM 23), which is therefore written as its encoding (`.insn r`, 8.5.1 of
the specification). The assembly names only the instruction (its own vsetvli: the instructions need LMUL 1);
LLVM allocates the registers and keeps the accumulators in them across the k loop. llvmlite cannot assemble
RISC-V inline assembly, so a module holding it is turned into code by zig's clang (compiler/codegen.py).
Under QEMU the instructions trap and the kernel server carries them out (cpp/matrix_emulation.c)."""
from __future__ import annotations

from dataclasses import dataclass

from mlir import ir
from mlir.dialects import arith, func, llvm, memref, scf, vector

from . import index_math as im
from .smt_microkernel import ALIGNMENT, STACK_PANEL_BYTES, PackedMatmul, _function
from .smt_panels import add, convert, loop, mul, plus, zero

ROW_TILES = 2     # A tiles per register block
COL_TILES = 4     # B tiles per register block


@dataclass(frozen=True)
class Geometry:
    """One matrix instruction's tiles and how the micro-kernel issues it."""
    tile: int          # R: rows of an A tile, columns of a B tile, rows and columns of a C tile
    step: int          # S: k per tile
    element: str       # the operands' type ("i8", "f16")
    accumulator: str   # the sums' type ("i32", "f32")
    sew: int           # element bits, as the tile loads' vsetvli gives them
    instruction: str   # the assembly of one instruction, "{acc}, {a}, {b}" its operands

    @property
    def tile_elements(self) -> int:
        return self.tile * self.step

    def element_type(self) -> ir.Type:
        return ir.F16Type.get() if self.element == "f16" else ir.IntegerType.get_signless(8)

    def accumulator_type(self) -> ir.Type:
        return ir.F32Type.get() if self.accumulator == "f32" else ir.IntegerType.get_signless(32)


# smt.vfwmadot vd, vs1, vs2: funct7 1001111, funct3 100, custom-1 (the specification's 8.5.1)
_VFWMADOT = ".insn r 0x2b, 0x4, 0x4f, {acc}, {a}, {b}"
GEOMETRIES = {
    ("ime", "i8"): Geometry(4, 8, "i8", "i32", 8, "smt.vmadot {acc}, {a}, {b}"),
    ("a100", "i8"): Geometry(8, 16, "i8", "i32", 8, "smt.vmadot {acc}, {a}, {b}"),
    ("a100", "f16"): Geometry(8, 8, "f16", "f32", 16, _VFWMADOT),
}


VIEWS = False     # A and B are row-major buffers (the packing's gathers read them at constant offsets)


def geometry(spec: PackedMatmul) -> Geometry | None:
    return GEOMETRIES.get((spec.kernel.name, spec.a.element))


def supports(spec: PackedMatmul) -> bool:
    """Whether this emitter computes `spec`: operands of a type the kernel's matrix instruction takes
    (int8, or fp16 on the A100), summed in its accumulator type, B packed by each call, no row bound, C_out
    the product's own buffer or the accumulator."""
    g = geometry(spec)
    return (g is not None and spec.b.element == g.element and spec.accumulator == g.accumulator
            and not spec.b_panels and not spec.row_bound and not spec.strided_out)


def define(module_body: ir.Block, spec: PackedMatmul) -> None:
    """Adds `func.func private @<spec.name>(a, b, [c_in,] c_out)`: a, b and c_in row-major buffers (or
    packed tiles), c_out the caller's buffer (or, in place, the accumulator)."""
    inputs = [spec.a.memref_type(True), spec.b.memref_type(True)] + ([spec.c_in.memref_type(True)] if spec.c_in else [])
    inputs.append(spec.c_out.memref_type(contiguous=True))
    fn, entry = _function(module_body, spec.name, inputs)
    with ir.InsertionPoint(entry), ir.Location.unknown():
        args = list(entry.arguments)
        _body(spec, geometry(spec), args[0], args[1], args[2] if spec.c_in else None, args[-1])
        func.ReturnOp([])


def _ceil(x: int, d: int) -> int:
    return -(-x // d)


def _body(spec: PackedMatmul, g: Geometry, a, b, c_in, c_out) -> None:
    m, k, n = spec.a.rows, spec.a.cols, spec.b.cols
    k_tiles = _ceil(k, g.step)
    row_blocks, col_blocks = _ceil(m, g.tile * ROW_TILES), _ceil(n, g.tile * COL_TILES)
    ap = _panel(row_blocks * ROW_TILES * k_tiles * g.tile_elements, g)
    bp = _panel(col_blocks * COL_TILES * k_tiles * g.tile_elements, g)
    if spec.a.packed:
        _pack(g, ap, lambda r, kk: spec.a.at(r, kk), a, m, k, k_tiles, row_blocks * ROW_TILES * g.tile)
    else:
        _gather_pack(g, ap, a, True, m, k, k_tiles, row_blocks * ROW_TILES * g.tile)
    if spec.b.packed:
        _pack(g, bp, lambda c, kk: spec.b.at(kk, c), b, n, k, k_tiles, col_blocks * COL_TILES * g.tile)
    else:
        _gather_pack(g, bp, b, False, n, k, k_tiles, col_blocks * COL_TILES * g.tile)

    def column_block(h0, _):
        def row_block(g0, _):
            accs = _products(g, ap, bp, g0, h0, k_tiles)
            _write_back(spec, g, accs, c_in, c_out, g0, h0)
        loop(0, row_blocks, 1, row_block)
    loop(0, col_blocks, 1, column_block)


def _panel(elements: int, g: Geometry) -> ir.Value:
    alloc = memref.AllocaOp if elements * g.sew // 8 <= STACK_PANEL_BYTES else memref.AllocOp
    return alloc(ir.MemRefType.get([elements], g.element_type()), [], [], alignment=ALIGNMENT).result


def _pack(g: Geometry, panel, index, source, extent: int, k: int, k_tiles: int, padded: int) -> None:
    """panel[(x / R) * k_tiles + kk / S][x % R][kk % S] = source[index(x, kk)] for x < extent, kk < k;
    zeros elsewhere (rows or columns past the matrix, steps past K). Element by element: for packed smt
    tiles."""
    zero_value = zero(g.element_type())

    def fill(x, _):
        def step(kk, _):
            inside = arith.AndIOp(arith.CmpIOp(arith.CmpIPredicate.ult, x, im.const(extent)).result,
                                  arith.CmpIOp(arith.CmpIPredicate.ult, kk, im.const(k)).result).result
            # a clamped index keeps the load inside the matrix; select gives the padding its zero
            xs = arith.MinUIOp(x, im.const(extent - 1)).result
            ks = arith.MinUIOp(kk, im.const(k - 1)).result
            value = memref.LoadOp(source, index(xs, ks)).result
            tile = add(mul(arith.DivUIOp(x, im.const(g.tile)).result, k_tiles),
                       arith.DivUIOp(kk, im.const(g.step)).result)
            at = add(mul(tile, g.tile_elements), mul(arith.RemUIOp(x, im.const(g.tile)).result, g.step),
                     arith.RemUIOp(kk, im.const(g.step)).result)
            memref.StoreOp(arith.SelectOp(inside, value, zero_value).result, panel, [at])
        loop(0, k_tiles * g.step, 1, step)
    loop(0, padded, 1, fill)


def _gather_pack(g: Geometry, panel, source, rows_are_x: bool, extent: int, k: int, k_tiles: int,
                 padded: int) -> None:
    """_pack for a plain row-major matrix, a tile at a time: one gather of the tile's R * S elements (RVV's
    indexed load) from fixed offsets, then one store; at the matrix's edges a mask cuts what lies past it
    (those lanes read nothing and are zero). `rows_are_x`: tile rows x run along the matrix's rows (A), else
    along its columns (B, whose tiles hold R of its columns)."""
    shape = ir.MemRefType(source.type).shape
    cols = shape[1]
    flat = _flat(source)
    i32 = ir.IntegerType.get_signless(32)
    lanes = list(range(g.tile_elements))
    # lane p holds tile element (x, kk) = (p / S, p % S)
    offsets = [(p // g.step) * cols + p % g.step if rows_are_x else (p % g.step) * cols + p // g.step
               for p in lanes]
    offset_vector = _constant_vector(offsets, i32)
    x_of_lane = _constant_vector([p // g.step for p in lanes], i32)
    k_of_lane = _constant_vector([p % g.step for p in lanes], i32)
    tile_type = ir.VectorType.get([g.tile_elements], g.element_type())
    zeros = arith.ConstantOp(tile_type, ir.DenseElementsAttr.get_splat(tile_type, _zero_attr(g.element_type()))).result
    all_lanes = _constant_vector([1] * g.tile_elements, ir.IntegerType.get_signless(1))

    def tile(xt, t, masked: bool):
        x0, k0 = mul(xt, g.tile), mul(t, g.step)
        mask = all_lanes
        if masked:
            left_x = arith.IndexCastOp(i32, im.as_value(add(im.const(extent), mul(x0, -1)))).result
            left_k = arith.IndexCastOp(i32, im.as_value(add(im.const(k), mul(k0, -1)))).result
            mask = arith.AndIOp(_lanes_below(x_of_lane, left_x), _lanes_below(k_of_lane, left_k)).result
        start = add(mul(x0, cols), k0) if rows_are_x else add(mul(k0, cols), x0)
        values = vector.GatherOp(tile_type, flat, [im.as_value(start)], offset_vector, mask, zeros).result
        vector.StoreOp(values, panel, [_tile_at(g, xt, t, k_tiles)])

    # The sizes are known here: the tiles wholly inside the matrix (nearly all) need no mask, which LLVM
    # then leaves out (an unmasked indexed load); only the last row and k tiles compute one.
    whole_x, whole_k = extent // g.tile, k // g.step
    for x_lo, x_hi in ((0, whole_x), (whole_x, padded // g.tile)):
        for k_lo, k_hi in ((0, whole_k), (whole_k, k_tiles)):
            if x_lo < x_hi and k_lo < k_hi:
                _tiles(x_lo, x_hi, k_lo, k_hi, tile, masked=x_lo == whole_x or k_lo == whole_k)


def _zero_attr(element: ir.Type) -> ir.Attribute:
    if isinstance(element, ir.IntegerType):
        return ir.IntegerAttr.get(element, 0)
    return ir.FloatAttr.get(element, 0.0)


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


def _products(g: Geometry, ap, bp, g0, h0, k_tiles: int) -> list:
    """The block's 2 x 4 accumulator tiles (vector<R*R x sums> each, row-major R x R) over every k tile.
    Carried as the registers' 32-bit patterns (vector<R*R x i32>) and read as fp32 at the end: LLVM 22
    crashes on inline-assembly operands of floating-point vector types (a <64 x float> or <64 x half>
    output segfaults its RISC-V code generation), and integer ones of the same size work."""
    bits = ir.VectorType.get([g.tile * g.tile], ir.IntegerType.get_signless(32))
    zeros = arith.ConstantOp(bits, ir.DenseElementsAttr.get_splat(bits, _zero_attr(bits.element_type))).result
    a_base, b_base = (memref.ExtractAlignedPointerAsIndexOp(p).result for p in (ap, bp))
    element_bytes = g.sew // 8

    def step(t, accs):
        a = [add(a_base, mul(_tile_at(g, add(mul(g0, ROW_TILES), i), t, k_tiles), element_bytes))
             for i in range(ROW_TILES)]
        b = [add(b_base, mul(_tile_at(g, add(mul(h0, COL_TILES), j), t, k_tiles), element_bytes))
             for j in range(COL_TILES)]
        return _instructions(g, accs, [_address(x) for x in a + b])
    accs = loop(0, k_tiles, 1, step, [zeros] * (ROW_TILES * COL_TILES))
    if g.accumulator == "i32":
        return accs
    sums = ir.VectorType.get([g.tile * g.tile], g.accumulator_type())
    return [vector.BitCastOp(sums, acc).result for acc in accs]


def _tile_at(g: Geometry, tile, t, k_tiles: int) -> ir.Value:
    """The element offset of tile (tile, t) in a panel."""
    return im.as_value(mul(add(mul(tile, k_tiles), t), g.tile_elements))


def _address(index) -> ir.Value:
    return arith.IndexCastOp(ir.IntegerType.get_signless(64), im.as_value(index)).result


def _instructions(g: Geometry, accs: list, tiles: list) -> list:
    """acc[i * 4 + j] += A tile i times B tile j, one matrix instruction each, in one inline-assembly
    statement that loads the tiles too (from `tiles`, the addresses of A's then B's): the tile registers
    live only inside it, so LLVM can neither hoist the loads of an unrolled k loop nor run out of registers.
    Operands: $0..$7 the accumulators, $8..$13 the tile registers (scratch outputs), $14..$21 the
    accumulators' inputs (tied), then the addresses."""
    count, scratch = len(accs), len(tiles)
    first_address = 2 * count + scratch
    lines = [f"vsetvli t0, zero, e{g.sew}, m1"]
    lines += [f"vle{g.sew}.v ${count + x}, (${first_address + x})" for x in range(scratch)]
    for i in range(ROW_TILES):
        for j in range(COL_TILES):
            lines.append(g.instruction.format(acc=f"${i * COL_TILES + j}", a=f"${count + i}",
                                              b=f"${count + ROW_TILES + j}"))
    constraints = ",".join(["=&^vr"] * (count + scratch) + [str(x) for x in range(count)] + ["r"] * scratch
                           + ["~{t0}", "~{vl}", "~{vtype}"])
    tile_type = f"vector<{g.tile_elements}xi{g.sew}>"   # integer: see _products
    result_type = ir.Type.parse("!llvm.struct<(" + ", ".join([str(accs[0].type)] * count + [tile_type] * scratch) + ")>")
    # reads memory the packing wrote: a side effect, so that it stays after those stores
    asm = llvm.InlineAsmOp(result_type, accs + tiles, "\n".join(lines), constraints, has_side_effects=True)
    return [llvm.ExtractValueOp(accs[0].type, asm.res, [x]).result for x in range(count)]


def _write_back(spec: PackedMatmul, g: Geometry, accs: list, c_in, c_out, g0, h0) -> None:
    """C's block (+)= the accumulator tiles: a tile at a time by a masked scatter of its R * R sums (after a
    masked gather of what they are added to) where C and C_in are plain matrices, else element by
    element. The mask cuts what lies past C's edges."""
    row0, col0 = mul(g0, g.tile * ROW_TILES), mul(h0, g.tile * COL_TILES)
    if spec.c_out.packed or (spec.c_in is not None and spec.c_in.packed):
        _write_elements(spec, g, accs, c_in, c_out, row0, col0)
        return
    m, n = spec.a.rows, spec.b.cols
    i32 = ir.IntegerType.get_signless(32)
    r = g.tile
    lanes = range(r * r)
    offsets = _constant_vector([(p // r) * n + p % r for p in lanes], i32)
    row_of_lane, col_of_lane = (_constant_vector([f(p) for p in lanes], i32)
                                for f in (lambda p: p // r, lambda p: p % r))
    out, earlier = _flat(c_out), _earlier(spec, c_in, c_out)
    earlier = _flat(earlier) if earlier is not None else None
    out_element = ir.MemRefType(out.type).element_type
    if earlier is not None:
        earlier_type = ir.VectorType.get([r * r], ir.MemRefType(earlier.type).element_type)
        zeros = arith.ConstantOp(earlier_type, ir.DenseElementsAttr.get_splat(
            earlier_type, _zero_attr(earlier_type.element_type))).result
    for i in range(ROW_TILES):
        for j in range(COL_TILES):
            row, col = add(row0, i * r), add(col0, j * r)
            left_rows = arith.IndexCastOp(i32, im.as_value(add(im.const(m), mul(row, -1)))).result
            left_cols = arith.IndexCastOp(i32, im.as_value(add(im.const(n), mul(col, -1)))).result
            mask = arith.AndIOp(_lanes_below(row_of_lane, left_rows), _lanes_below(col_of_lane, left_cols)).result
            start = [im.as_value(add(mul(row, n), col))]
            sums = accs[i * COL_TILES + j]
            if earlier is not None:
                before = vector.GatherOp(zeros.type, earlier, start, offsets, mask, zeros).result
                sums = plus(sums, convert(before, g.accumulator_type()))
            vector.ScatterOp(None, out, start, offsets, mask, convert(sums, out_element))


def _flat(matrix: ir.Value) -> ir.Value:
    """A row-major matrix as one row."""
    mtype = ir.MemRefType(matrix.type)
    rows, cols = mtype.shape
    return memref.CollapseShapeOp(ir.MemRefType.get([rows * cols], mtype.element_type), matrix, [[0, 1]]).result


def _earlier(spec: PackedMatmul, c_in, c_out):
    """The matrix the product is added to: C_in, or C_out itself in place, or None."""
    return c_in if c_in is not None else c_out if spec.in_place else None


def _write_elements(spec, g: Geometry, accs, c_in, c_out, row0, col0) -> None:
    """Through a stack copy of the tiles, every element inside C, wherever C and C_in keep it."""
    m, n = spec.a.rows, spec.b.cols
    r = g.tile
    tiles = memref.AllocaOp(ir.MemRefType.get([len(accs) * r * r], g.accumulator_type()), [], [],
                            alignment=ALIGNMENT).result
    for x, acc in enumerate(accs):
        vector.StoreOp(acc, tiles, [im.const(x * r * r)])
    earlier = _earlier(spec, c_in, c_out)
    earlier_layout = spec.c_in if c_in is not None else spec.c_out

    def row(rr, _):
        def col(c, _):
            y, x = im.as_value(add(row0, rr)), im.as_value(add(col0, c))
            inside = arith.AndIOp(arith.CmpIOp(arith.CmpIPredicate.ult, y, im.const(m)).result,
                                  arith.CmpIOp(arith.CmpIPredicate.ult, x, im.const(n)).result).result
            branch = scf.IfOp(inside)
            with ir.InsertionPoint(branch.then_block):
                tile = add(mul(arith.DivUIOp(rr, im.const(r)).result, COL_TILES), arith.DivUIOp(c, im.const(r)).result)
                at = add(mul(tile, r * r), mul(arith.RemUIOp(rr, im.const(r)).result, r),
                         arith.RemUIOp(c, im.const(r)).result)
                value = memref.LoadOp(tiles, [im.as_value(at)]).result
                if earlier is not None:
                    before = memref.LoadOp(earlier, earlier_layout.at(y, x)).result
                    value = plus(value, convert(before, g.accumulator_type()))
                memref.StoreOp(convert(value, ir.MemRefType(c_out.type).element_type), c_out, spec.c_out.at(y, x))
                scf.YieldOp([])
        loop(0, r * COL_TILES, 1, col)
    loop(0, r * ROW_TILES, 1, row)
