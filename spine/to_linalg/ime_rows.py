"""A few rows times a matrix on K1's matrix unit (spine/microkernels.py's "ime"): int8 `tl.dot(a, b)` with
a of at most 4 rows, summed in int32. A token's products in decoding are such dots (M = 1), which the
packed matmul (ime_matmul.py) would pad to 8 rows and for which it would pack B into tiles by every call.

`smt.vmadot vd, vs1, vs2` adds A.B^T of a 4 x 8 tile of A (vs1, row-major) and 4 columns of B of 8 steps
of k each (vs2) into a 4 x 4 tile of int32 sums (the pair vd, vd+1, row-major). The function emitted here
computes C[:M] (+)= A @ B over B^T, the rows of B^T being B's columns:

    a[t] = A[:, 8t .. 8t+7]                       one register a k tile (v8 + t), loaded once
    for each 4 columns h of B:
        acc = C[:, 4h .. 4h+3] or 0               the pair v24, v25
        b[0..] = B^T[4h .. 4h+3][8t .. 8t+7]      one strided segment load for up to 8 k tiles: field t
                                                  of each column's segment lands in v16 + t, which is
                                                  the layout vs2 wants (a column's 8 k next to each other)
        acc += a[t] . b[t]^T                      one smt.vmadot a k tile
        C[:, 4h .. 4h+3] = acc's first M rows

- B^T is what the kernel gives when it writes `tl.dot(a, tl.trans(x))` (x: [N, K], a weight matrix's
  rows): x itself is read, no transposed copy is made (`transposed_source`). Rows of x that do not start
  on 8-byte boundaries are copied into an aligned buffer first (the segment load reads 8-byte elements).
- A B^T computed as `x & 15` or `x >> 4` from bytes x (4-bit weights, two in a byte) is read from x and
  the nibble taken in the registers the segment load filled (one vand or vsrl for all k tiles).
- With M = 1 a k tile of A is 8 bytes of its row (vl 8); tile rows 1..3 hold what the register held,
  and so do the sums' rows 1..3, which are never stored. More rows are first copied into a small panel
  of whole tiles.
- The column tiles are known when the function is emitted: two whole tiles an iteration where their B
  fits the registers (at most 4 k tiles: v16.. and v20.., sums in v24 and v28), which halves the vtype
  changes and the loop's own instructions a tile; the last tile of fewer than 4 columns loads and stores
  only those (vl < 4), so nothing past B^T or C is touched. K must be a multiple of 8 (`takes`); other
  dots stay generic loops.

Why one inline-assembly statement a call holds the whole column loop: a segment load's fields land in
consecutive registers, which an inline-assembly operand cannot name one by one, and LLVM 22 has no code
generation for smt.vmadot (see ime_matmul.py). The statement names its registers and declares them
clobbered. Under QEMU the matrix instructions trap into the kernel server's emulation
(cpp/matrix_emulation.c)."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

from mlir import ir
from mlir.dialects import arith, func, llvm, memref, scf, vector

from . import index_math as im
from .smt_microkernel import ALIGNMENT, STACK_PANEL_BYTES, _function
from .smt_panels import Operand, add, loop, mul

ROWS = 4          # rows of an A tile and of the sums' tile (K1, VLEN 256)
STEP = 8          # k of a tile
COLUMNS = 4       # columns of B a tile holds
MAX_TILES = 8     # k tiles a segment load can fill (its 8 fields)


@dataclass(frozen=True)
class RowProduct:
    """C[:m] (+)= A[:m] @ B, B given as B^T [n, k] (with `nibble`, as the bytes it is taken from)."""
    m: int
    k: int
    n: int
    nibble: str = ""        # "low": B^T = x & 15, "high": B^T = x >> 4, of the bytes passed
    accumulate: bool = False  # C holds what the product is added to (else it is overwritten)

    @property
    def name(self) -> str:
        return f"spine_ime_rows_{hashlib.sha256(repr(self).encode()).hexdigest()[:16]}"

    @property
    def tiles(self) -> int:
        return self.k // STEP


def takes(kernel_name: str, a_shape, b_shape, a_element: str, b_element: str, sums: str) -> bool:
    """Whether a dot of these operands runs here: int8 x int8 -> int32 on K1's unit, 2-D, at most 4 rows,
    K a multiple of 8."""
    return (kernel_name == "ime" and len(a_shape) == 2 and len(b_shape) == 2 and a_element == b_element == "i8"
            and sums == "i32" and 1 <= a_shape[0] <= ROWS and a_shape[1] % STEP == 0 and a_shape[1] > 0)


def transposed_source(b: ir.Value) -> tuple[ir.Value | None, str]:
    """B^T for the dot's B, as this emitter reads it: (x, nibble) when B is linalg.transpose of x, or of
    `x & 15` / `x >> 4` (nibble "low" / "high"); (None, "") when B is anything else (transposed first)."""
    owner = _defining(b)
    if owner is None or owner.name != "linalg.transpose":
        return None, ""
    if list(ir.DenseI64ArrayAttr(owner.attributes["permutation"])) != [1, 0]:
        return None, ""
    source = owner.operands[0]
    producer = _defining(source)
    if producer is not None and producer.name == "arith.andi":
        for x, mask in (producer.operands, reversed(list(producer.operands))):
            if _splat_value(mask) == 15:
                return x, "low"
    if producer is not None and producer.name == "arith.shrui" and _splat_value(producer.operands[1]) == 4:
        return producer.operands[0], "high"
    return source, ""


def _defining(value: ir.Value):
    """The operation that defines `value`, or None for a block argument."""
    owner = value.owner
    if isinstance(owner, ir.Block):
        return None
    return owner.operation if hasattr(owner, "operation") else owner


def _splat_value(value: ir.Value):
    """The integer every element of `value` holds, when it is a constant splat (arith.constant, or a
    linalg.generic that yields one constant, as to_linalg makes a splat), else None."""
    owner = _defining(value)
    if owner is None:
        return None
    name = owner.name
    if name == "arith.constant":
        attr = owner.attributes["value"]
        if isinstance(attr, ir.DenseIntElementsAttr) and attr.is_splat:
            return ir.IntegerAttr(attr.get_splat_value()).value
        return None
    if name != "linalg.generic":
        return None
    body = owner.regions[0].blocks[0]
    if len(body.arguments) != 1:      # inputs besides the output it fills
        return None
    yielded = body.operations[len(body.operations) - 1].operands[0]
    return _constant_int(yielded)


def _constant_int(value: ir.Value):
    """A scalar integer constant, seen through index casts."""
    owner = _defining(value)
    if owner is None:
        return None
    if owner.name == "arith.index_cast":
        return _constant_int(owner.operands[0])
    if owner.name == "arith.constant":
        attr = owner.attributes["value"]
        return ir.IntegerAttr(attr).value if isinstance(attr, ir.IntegerAttr) else None
    return None


def operand_type(rows: int, cols: int) -> ir.Type:
    """A and B^T: any offset and row stride, bytes next to each other along a row."""
    return Operand((rows, cols), "i8").memref_type(unit_columns=True)


def define(module_body: ir.Block, spec: RowProduct) -> None:
    """Adds `func.func private @<spec.name>(a, bt, c)`: a [m, k] and bt [n, k] int8 (operand_type), c [m, n]
    int32 row-major."""
    i32 = ir.IntegerType.get_signless(32)
    c_type = ir.MemRefType.get([spec.m, spec.n], i32)
    fn, entry = _function(module_body, spec.name, [operand_type(spec.m, spec.k), operand_type(spec.n, spec.k), c_type])
    with ir.InsertionPoint(entry), ir.Location.unknown():
        a, bt, c = entry.arguments
        a_tiles, a_step = _a_tiles(spec, a)
        bt_base, bt_stride = _base_and_row_stride(bt)
        c_base, _ = _base_and_row_stride(c, 4)
        misaligned = arith.CmpIOp(arith.CmpIPredicate.ne, arith.AndIOp(arith.OrIOp(bt_base, bt_stride).result,
                                                                         im.const(7)).result, im.const(0)).result
        branch = scf.IfOp(misaligned, [], has_else=True)
        with ir.InsertionPoint(branch.then_block):
            _aligned_copy_products(spec, bt, a_tiles, a_step, c_base)
            scf.YieldOp([])
        with ir.InsertionPoint(branch.else_block):
            _products(spec, a_tiles, a_step, bt_base, bt_stride, c_base)
            scf.YieldOp([])
        func.ReturnOp([])


def _base_and_row_stride(matrix: ir.Value, element_bytes: int = 1) -> tuple[ir.Value, ir.Value]:
    """The address of a 2-D memref's first element and its row stride, in bytes (index values)."""
    meta = memref.ExtractStridedMetadataOp(matrix)
    base = memref.ExtractAlignedPointerAsIndexOp(matrix).result
    offset, row_stride = meta.offset, meta.strides[0]
    return (im.as_value(add(base, mul(offset, element_bytes))), im.as_value(mul(row_stride, element_bytes)))


def _a_tiles(spec: RowProduct, a: ir.Value) -> tuple[ir.Value, int]:
    """The address of A's first k tile and the bytes between tiles: A's row itself for one row (a tile is
    8 of its bytes), else a panel of whole 4 x 8 tiles the rows are copied into."""
    if spec.m == 1:
        base, _ = _base_and_row_stride(a)
        return base, STEP
    i8 = ir.IntegerType.get_signless(8)
    tile_bytes = ROWS * STEP
    panel = memref.AllocaOp(ir.MemRefType.get([spec.tiles * tile_bytes], i8), [], [], alignment=ALIGNMENT).result
    piece = ir.VectorType.get([STEP], i8)

    def copy(t, _):
        for row in range(spec.m):
            values = vector.LoadOp(piece, a, [im.const(row), im.as_value(mul(t, STEP))]).result
            vector.StoreOp(values, panel, [im.as_value(add(mul(t, tile_bytes), row * STEP))])
    loop(0, spec.tiles, 1, copy)
    return memref.ExtractAlignedPointerAsIndexOp(panel).result, tile_bytes


def _aligned_copy_products(spec: RowProduct, bt: ir.Value, a_tiles, a_step: int, c_base) -> None:
    """_products over a copy of B^T in an aligned buffer (B^T's rows do not start on 8-byte boundaries)."""
    size = spec.n * spec.k
    copy_type = ir.MemRefType.get([spec.n, spec.k], ir.IntegerType.get_signless(8))
    on_stack = size <= STACK_PANEL_BYTES
    copy = (memref.AllocaOp if on_stack else memref.AllocOp)(copy_type, [], [], alignment=ALIGNMENT).result
    memref.CopyOp(bt, copy)
    base, stride = _base_and_row_stride(copy)
    _products(spec, a_tiles, a_step, base, stride, c_base)
    if not on_stack:
        memref.DeallocOp(copy)


def _products(spec: RowProduct, a_tiles, a_step: int, bt_base, bt_stride, c_base) -> None:
    """One inline-assembly statement per 8 k tiles (the second and later add to C)."""
    i64 = ir.IntegerType.get_signless(64)
    for first in range(0, spec.tiles, MAX_TILES):
        tiles = min(MAX_TILES, spec.tiles - first)
        args = [add(a_tiles, first * a_step), add(bt_base, first * STEP), bt_stride, c_base, im.const(spec.n * 4)]
        operands = [arith.IndexCastOp(i64, im.as_value(x)).result for x in args]
        text = assembly(spec.m, spec.n, tiles, a_step, spec.nibble, spec.accumulate or first > 0)
        clobbers = ([f"~{{t{i}}}" for i in range(7)] + [f"~{{v{i}}}" for i in range(8, 32)]
                    + ["~{vl}", "~{vtype}", "~{memory}"])
        llvm.InlineAsmOp(None, operands, text, ",".join(["r"] * len(operands) + clobbers), has_side_effects=True)


def assembly(m: int, n: int, tiles: int, a_step: int, nibble: str, accumulate: bool) -> str:
    """The column loop for `tiles` k tiles (at most 8) over n columns: pairs of whole column tiles an
    iteration where two tiles' B fit the registers (at most 4 k tiles), then single whole tiles, then the
    last tile of fewer than 4 columns. Operands: $0 A's first tile, $1 B^T's first row at this k, $2 B^T's
    row stride, $3 C, $4 C's row stride (bytes)."""
    lines = ["vsetivli zero, 8, e8, m1" if m == 1 else "vsetvli t0, zero, e8, m1", "vle8.v v8, ($0)"]
    for t in range(1, tiles):
        lines += [f"addi t0, $0, {t * a_step}", f"vle8.v v{8 + t}, (t0)"]
    lines += ["mv t2, $1", "mv t4, $3", "slli t3, $2, 2"]
    whole, tail = divmod(n, COLUMNS)
    pairs = whole // 2 if tiles <= MAX_TILES // 2 else 0
    for label, count, width, columns in ((1, pairs, 2, COLUMNS), (2, whole - 2 * pairs, 1, COLUMNS),
                                         (3, 1 if tail else 0, 1, tail)):
        if not count:
            continue
        body = _column_tiles(m, tiles, width, columns, nibble, accumulate)
        if count == 1:
            lines += body
        else:
            lines += [f"li t1, {count}", f"{label}:"] + body + ["addi t1, t1, -1", f"bnez t1, {label}b"]
    return "\n".join(lines)


# The registers of the (at most two) column tiles an iteration computes: the sums' pair, the two registers
# rows 1 and 3 pass through, and the first of B's k tiles
SLOTS = (("v24", "v25", "v26", "v27", 16), ("v28", "v29", "v30", "v31", 20))


def _column_tiles(m: int, tiles: int, width: int, columns: int, nibble: str, accumulate: bool) -> list[str]:
    """`width` column tiles of `columns` columns each (vl), from B^T's row t2 and C's column t4 on; t2 and t4
    move past them."""
    slots = SLOTS[:width]
    lines = []
    if accumulate:
        for x, slot in enumerate(slots):
            if x == 0 or m >= 2:   # the rows' slides (m >= 2) leave vl at 8
                lines.append(f"vsetivli zero, {columns}, e32, m1")
            lines += _c_rows(m, slot, 16 * x, load=True)
    else:
        lines.append("vsetivli zero, 16, e32, m2")
        lines += [f"vmv.v.i {slot[0]}, 0" for slot in slots]
    segment = f"vlsseg{tiles}e64.v" if tiles > 1 else "vlse64.v"
    lines += [f"vsetivli zero, {columns}, e64, m1", f"{segment} v16, (t2), $2"]
    if width == 2:
        lines += ["add t0, t2, t3", f"{segment} v20, (t0), $2"]
    if nibble:
        group = 8 if width == 2 else 1 << (tiles - 1).bit_length()
        lines += [f"vsetvli t0, zero, e8, m{group}", "vand.vi v16, v16, 15" if nibble == "low" else "vsrl.vi v16, v16, 4"]
    lines.append("vsetvli t0, zero, e8, m1")
    for acc, _, _, _, b in slots:
        lines += [f"smt.vmadot {acc}, v{8 + t}, v{b + t}" for t in range(tiles)]
    lines.append(f"vsetivli zero, {columns}, e32, m1")
    for x, slot in enumerate(slots):
        lines += _c_rows(m, slot, 16 * x, load=False)
    lines += ["add t2, t2, t3"] * width + [f"addi t4, t4, {16 * width}"]
    return lines


def _c_rows(m: int, slot: tuple, offset: int, load: bool) -> list[str]:
    """C's rows to or from a column tile's sums (`slot`), `offset` bytes past C's column t4: row 0 is the
    pair's first register's first 4 elements, row 1 its last 4, rows 2 and 3 the second register's (vl: the
    tile's columns). Rows 1 and 3 go through the slot's other two registers by a slide."""
    first, second, odd, odd2, _ = slot
    op = "vle32.v" if load else "vse32.v"
    lines = []
    if not load:
        lines += [f"vslidedown.vi {odd}, {first}, 4"] if m >= 2 else []
        lines += [f"vslidedown.vi {odd2}, {second}, 4"] if m >= 4 else []
    lines += [f"addi t5, t4, {offset}", f"{op} {first}, (t5)"] if offset else [f"{op} {first}, (t4)"]
    for row, register in ((1, odd), (2, second), (3, odd2)):
        if row < m:
            lines += [f"add t5, {'t4' if row == 1 and not offset else 't5'}, $4", f"{op} {register}, (t5)"]
    if load and m >= 2:
        lines += ["vsetivli zero, 8, e32, m1", f"vslideup.vi {first}, {odd}, 4"]
        lines += [f"vslideup.vi {second}, {odd2}, 4"] if m >= 4 else []
    return lines
