"""The packed matmul on Intel's AMX tiles (spine/microkernels.py's "amx"): int8 x int8 -> int32 (`tdpbssd`) and
bf16 x bf16 -> fp32 (`tdpbf16ps`), emitted as one private function per operand layout with the same arguments
as smt_microkernel.py's: C (+)= A @ B.

A tile register holds 16 rows of 64 bytes. `tdpbssd c, a, b` adds A.B of a 16x64 int8 tile of A (row-major)
and a 64x16 tile of B (16 rows of B's VNNI layout: vnni_panels.py) into a 16x16 int32 tile of C; bf16 is the
same with 32 k per tile. The operands are laid out by vnni_panels.compute (A in place or padded, B in VNNI
rows, C in place or padded); tile (x, y) of a matrix starts 16 * x rows and 64 * y bytes in:

    for i over pairs of A's tile rows (32 rows):
        for j over pairs of B's tile columns (32 columns: 2 KiB of B per k tile):
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
from mlir.dialects import arith, func, llvm, scf

from . import kept_panels
from . import vnni_panels as vp
from .smt_microkernel import PackedMatmul, _function
from .smt_panels import add, loop, mul

ROWS = 16            # rows of every tile; columns of a C tile (16 sums of 32 bits make a 64-byte row)
ROW_BYTES = 64
BLOCK = 2            # C tiles per register block along M and along N
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


TYPES = {("i8", "i32"): _Types("i8", "i32", "llvm.x86.tdpbssd.internal"),
         ("bf16", "f32"): _Types("bf16", "f32", "llvm.x86.tdpbf16ps.internal")}


SHARES_B = True     # B's panel may be kept for the launch (PackedMatmul.shared_b)
VIEWS = True      # A and B may be views of larger matrices (any strides)


def supports(spec: PackedMatmul) -> bool:
    """Whether this emitter computes `spec`: int8 products summed in int32 or bf16 in fp32, C of the sums'
    type, plain row-major matrices (smt's packed tiles go through the FMA kernel), B packed by each call,
    no row bound; C a view of a larger matrix only as an accumulator updated in place
    (PackedMatmul.strided_twin)."""
    operands = [spec.a, spec.b, spec.c_out] + ([spec.c_in] if spec.c_in else [])
    return (spec.a.element == spec.b.element and (spec.a.element, spec.accumulator) in TYPES
            and all(x.element == spec.accumulator for x in operands[2:])
            and not any(x.packed for x in operands) and not spec.b_panels and not spec.row_bound
            and (spec.c_in is not None or not spec.strided_out))


def define(module_body: ir.Block, spec: PackedMatmul) -> None:
    """Adds `func.func private @<spec.name>(a, b, [c_in,] c_out)`: a and b with any strides (views of the
    kernel's arguments: tile loads read A in place where its columns have unit stride), c_in and c_out
    row-major buffers (c_out the caller's, or, in place, the accumulator, which the strided twin takes as a
    view of a larger matrix); and the register block's function and the request for the tile state."""
    types = TYPES[spec.a.element, spec.accumulator]
    layout = vp.Layout(spec.a.rows, spec.b.cols, spec.a.cols, types.element, types.sums, BLOCK * ROWS, BLOCK * ROWS,
                       types.k_per_tile)
    _request_tiles(module_body)
    inputs = [spec.a.memref_type(), spec.b.memref_type()]
    inputs += [spec.c_in.memref_type(True)] if spec.c_in else []
    inputs.append(spec.c_out.memref_type(contiguous=not spec.strided_out, unit_columns=True))
    inputs += [ir.IntegerType.get_signless(1)] if spec.shared_b else []
    _, entry = _function(module_body, spec.name, inputs, reads_only=2)
    if spec.shared_b:
        kept_panels.declare(module_body)
    with ir.InsertionPoint(entry), ir.Location.unknown():
        args = list(entry.arguments)
        llvm.CallOp(None, [], [], [], callee=ir.FlatSymbolRefAttr.get(PERMISSION_FUNCTION))
        a, b = (vp.unit_columns(x, o) for x, o in ((args[0], spec.a), (args[1], spec.b)))
        shared = (args[1], args.pop()) if spec.shared_b else None
        c_in, c_out = args[2] if spec.c_in else None, args[-1]
        earlier = c_in if c_in is not None else c_out if spec.in_place else None
        vp.compute(layout, a, b, earlier, c_out, lambda *m: _blocks(module_body, layout, *m), shared=shared)
        func.ReturnOp([])


def _blocks(module_body, layout: vp.Layout, a: vp.Matrix, b: vp.Matrix, start, out: vp.Matrix) -> None:
    """Every register block of C: A's row pairs outermost, B's column pairs within. The other order (B's
    columns outermost, as the FMA kernel's panels go) was slower on a Sapphire Rapids Xeon, one thread, bf16:
    1024^3 in 256 x 256 x 128 tiles 4.80 -> 3.61 ms (torch 3.10), in 128 x 128 x 256 4.88 -> 4.05; 512^3 in
    128 x 128 x 512 0.378 -> 0.350 (best of 4 rounds, bench/RESULTS.md)."""
    name = _define_block(module_body, layout, start is not None)
    block_rows = BLOCK * ROWS
    matrices = [a, b, out] + ([start] if start is not None else [])
    strides = [vp.i64(m.row_bytes) for m in matrices]

    def row_block(i, _):
        def column_block(j, _):
            blocks = [(i, 0), (0, j), (i, j), (i, j)]       # each matrix's block, in rows and columns of blocks
            addresses = [add(m.address, mul(mul(y, block_rows), m.row_bytes), mul(x, BLOCK * ROW_BYTES))
                         for m, (y, x) in zip(matrices, blocks)]
            llvm.CallOp(None, [vp.i64(x) for x in addresses] + strides, [], [], callee=ir.FlatSymbolRefAttr.get(name))
        loop(0, layout.padded_n // block_rows, 1, column_block)
    loop(0, layout.padded_m // block_rows, 1, row_block)


def _define_block(module_body: ir.Block, layout: vp.Layout, accumulates: bool) -> str:
    """`llvm.func internal @spine_amx_block_<element>_k<k tiles>[_acc](a, b, c, [start,] a_row, b_row, c_row
    [, start_row])`, i64 addresses and the bytes between their rows: one register block, C's 2 x 2 tiles =
    start's (`accumulates`; else zero) + A's 2 tile rows times B's 2 tile columns over every k tile. An
    LLVM-dialect function of its own because the tile intrinsics (llvm.call_intrinsic) declare no memory
    effects, which buffer deallocation refuses in the functions it reads (func.func); it leaves llvm.func
    alone. Its one caller inlines it. Returns its name."""
    k_tiles = layout.padded_k // layout.k_step
    name = f"spine_amx_block_{layout.element}_k{k_tiles}" + ("_acc" if accumulates else "")
    if vp.defines(module_body, name):
        return name
    i64 = ir.IntegerType.get_signless(64)
    count = 2 * (4 if accumulates else 3)
    entry = vp.internal_function(module_body, name, [i64] * count)
    with ir.InsertionPoint(entry), ir.Location.unknown():
        half = count // 2
        (a, b, c), (a_row, b_row, c_row) = entry.arguments[:3], entry.arguments[half:half + 3]
        tile = ir.Type.parse("!llvm.x86_amx")
        rows, row_bytes = _i16(ROWS), _i16(ROW_BYTES)

        def at(base, row, x, y):
            """Tile (x, y) of the tile matrix at `base` whose rows are `row` bytes apart (i64): its pointer."""
            down = arith.MulIOp(row, vp.i64(mul(x, ROWS))).result
            offset = arith.AddIOp(down, vp.i64(mul(y, ROW_BYTES))).result
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
            return [llvm.call_intrinsic(tile, TYPES[layout.element, layout.sums].intrinsic,
                                        [rows, row_bytes, row_bytes, accs[r * BLOCK + s], a_tiles[r], b_tiles[s]], [], [])
                    for r in range(BLOCK) for s in range(BLOCK)]
        accs = loop(0, k_tiles, 1, step, first)
        for r in range(BLOCK):
            for s in range(BLOCK):
                llvm.call_intrinsic(None, "llvm.x86.tilestored64.internal",
                                    [rows, row_bytes, at(c, c_row, r, s), c_row, accs[r * BLOCK + s]], [], [])
        llvm.ReturnOp()
    return name


def _i16(value: int) -> ir.Value:
    return arith.ConstantOp(ir.IntegerType.get_signless(16), value).result


def _request_tiles(module_body: ir.Block) -> None:
    """`llvm.func internal @spine_amx_request_tiles()`, which asks Linux for the tile state the first time it
    runs: syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA), then a flag (a global of the
    kernel's) says it was done. Every AMX matmul calls it first: a constructor would be surer to run
    before, but LLVM puts constructors into `.ctors`, which nothing runs in a library linked without the C
    runtime's start files. Threads that race through it all ask (the request is idempotent). Its answer is
    not checked: where the CPU has no AMX the kernel faults at its first tile instruction, and the launch
    says so."""
    if vp.defines(module_body, PERMISSION_FUNCTION):
        return
    i8, i64 = ir.IntegerType.get_signless(8), ir.IntegerType.get_signless(64)
    ptr = ir.Type.parse("!llvm.ptr")
    syscall_type = ir.Type.parse("!llvm.func<i64 (i64, ...)>")
    flag = PERMISSION_FUNCTION + "_done"
    internal = ir.Attribute.parse("#llvm.linkage<internal>")
    with ir.InsertionPoint.at_block_begin(module_body), ir.Location.unknown():
        if not vp.defines(module_body, "syscall"):
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
