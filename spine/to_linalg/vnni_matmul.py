"""The packed matmul on x86's dot-product instructions (spine/microkernels.py's "vnni" and "avxvnni"): int8 x int8
-> int32 on `vpdpbusd` (AVX512-VNNI: Cascade Lake, Ice Lake, Zen 4 on; AVX-VNNI's 256-bit form: Alder Lake
on) and bf16 x bf16 -> fp32 on `vdpbf16ps` (AVX512-BF16: Cooper Lake, Zen 4 on), for x86 CPUs without AMX. Same arguments as smt_microkernel.py's:
C (+)= A @ B.

Each instruction adds, in each of 16 lanes, the products of 4 int8 (2 bf16) pairs: 64 (32) multiply-adds,
where the FMA kernel does 16 on operands widened to 32 bits. B is packed into VNNI rows (vnni_panels.py),
so that a 64-byte load holds 16 columns' G consecutive k; A's G consecutive k of one row are one 32-bit
broadcast (from memory, folded into the instruction):

    for j over blocks of 32 columns (B's VNNI rows there: 128 bytes each, in L1 across the row blocks):
        for i over blocks of 8 rows:                     (AVX-VNNI: 16 columns, 6 rows, ymm)
            acc[8][2] = C's block, or zero               16 of the 32 zmm registers
            for q over groups of G k:
                b[v] = B's VNNI row q, columns 32 j + 16 v ..             2 loads
                acc[r][v] += dot(b[v], broadcast(A[8 i + r][G q ..]))     16 vpdpbusd / vdpbf16ps
            C's block = acc

`vpdpbusd` multiplies unsigned bytes by signed ones. A is the signed operand (its broadcast is the one that
folds into the instruction); B is packed as unsigned bytes B + 128 (its sign bit flipped), and 128 times
each row's sum of A is taken off at the end: sum_k A (B + 128) - 128 sum_k A = sum_k A B, exactly, in
int32 as the FMA kernel's sums wrap.

Why LLVM's intrinsics, in an LLVM-dialect function of the register block: MLIR's x86vector dialect has
the instructions, but its Python bindings are not built; and buffer deallocation refuses ops without
declared memory effects in the functions it reads (func.func), as amx_matmul.py explains.

vdpbf16ps flushes subnormal inputs and results to zero and rounds each pair's sum once (Intel SDM), where
the FMA kernel rounds after every product: last-bit differences, and zero for sums below fp32's normal
range."""
from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, func, llvm, vector

from . import index_math as im
from . import kept_panels
from . import vnni_panels as vp
from .smt_microkernel import ALIGNMENT, PackedMatmul, _function
from .smt_panels import add, loop, mul

# (element, sums, lanes) -> the instruction's intrinsic; the register block's rows, vectors and lanes are the
# micro-kernel's (spine/microkernels.py: "vnni" 8 x 2 zmm, "avxvnni" 6 x 2 ymm)
INTRINSICS = {("i8", "i32", 16): "llvm.x86.avx512.vpdpbusd.512", ("bf16", "f32", 16): "llvm.x86.avx512bf16.dpbf16ps.512",
              ("i8", "i32", 8): "llvm.x86.avx512.vpdpbusd.256"}
SIGN_SHIFT = 7       # 128 = 1 << 7: what B's flipped sign bit adds to each byte
SHARES_B = True     # B's panel may be kept for the launch (PackedMatmul.shared_b)
VIEWS = True         # A and B may be views of larger matrices (any strides)


def supports(spec: PackedMatmul) -> bool:
    """Whether this emitter computes `spec`: int8 products summed in int32 or bf16 in fp32, C of the sums'
    type, plain matrices (smt's packed tiles go through the FMA kernel), B packed by each call, no row
    bound; C a view of a larger matrix only as an accumulator updated in place (PackedMatmul.strided_twin)."""
    operands = [spec.a, spec.b, spec.c_out] + ([spec.c_in] if spec.c_in else [])
    return (spec.a.element == spec.b.element and (spec.a.element, spec.accumulator, spec.kernel.lanes) in INTRINSICS
            and all(x.element == spec.accumulator for x in operands[2:])
            and not any(x.packed for x in operands) and not spec.b_panels and not spec.row_bound
            and (spec.c_in is not None or not spec.strided_out))


def define(module_body: ir.Block, spec: PackedMatmul) -> None:
    """Adds `func.func private @<spec.name>(a, b, [c_in,] c_out)`: a and b with any strides, c_in and c_out
    row-major buffers (c_out the caller's, or, in place, the accumulator, which the strided twin takes as a
    view of a larger matrix); and the register block's function."""
    kernel = spec.kernel
    layout = vp.Layout(spec.a.rows, spec.b.cols, spec.a.cols, spec.a.element, spec.accumulator, kernel.rows,
                       kernel.vectors * kernel.lanes, 4 // (1 if spec.a.element == "i8" else 2))
    inputs = [spec.a.memref_type(), spec.b.memref_type()] + ([spec.c_in.memref_type(True)] if spec.c_in else [])
    inputs.append(spec.c_out.memref_type(contiguous=not spec.strided_out, unit_columns=True))
    inputs += [ir.IntegerType.get_signless(1)] if spec.shared_b else []
    _, entry = _function(module_body, spec.name, inputs, reads_only=2)
    if spec.shared_b:
        kept_panels.declare(module_body)
    with ir.InsertionPoint(entry), ir.Location.unknown():
        args = list(entry.arguments)
        a, b = (vp.unit_columns(x, o) for x, o in ((args[0], spec.a), (args[1], spec.b)))
        shared = (args[1], args.pop()) if spec.shared_b else None
        c_in, c_out = args[2] if spec.c_in else None, args[-1]
        earlier = c_in if c_in is not None else c_out if spec.in_place else None
        integer = layout.element == "i8"
        sums = _row_sums(module_body, a, layout, kernel.lanes) if integer else None
        vp.compute(layout, a, b, earlier, c_out, lambda *m: _blocks(module_body, kernel, layout, sums, *m),
                   flip_b_sign=integer, shared=shared)
        func.ReturnOp([])


def _row_sums(module_body: ir.Block, a, layout: vp.Layout, lanes: int) -> ir.Value:
    """Each row's sum of A over K (int32; zero in the padding rows), for the unsigned B's correction."""
    i32 = ir.IntegerType.get_signless(32)
    sums = vp.typed(vp.panel(layout.padded_m * 4), i32, 4)
    step = 4 * lanes
    whole, left = layout.k // step, layout.k % step
    word = ir.VectorType.get([lanes], i32)
    byte_sums = ir.FlatSymbolRefAttr.get(_define_byte_sums(module_body, lanes))

    def add_bytes(total, values):
        return llvm.CallOp(word, [total, values], [], [], callee=byte_sums).result

    # The chunks add into one vector, reduced once a row: a reduction per chunk put a horizontal sum (ten
    # instructions) on every 64 bytes, a seventh of an int8 1024^3 product's time.
    def row(r, _):
        def chunk(t, carried):
            return [add_bytes(carried[0], vp.read(a, r, mul(t, step), step, None))]
        partial = loop(0, whole, 1, chunk, [vp.zero_vector(word)])[0]
        if left:
            partial = add_bytes(partial, vp.read(a, r, mul(im.const(whole), step), step, left))
        vp.store_scalar(vector.ReductionOp(i32, vector.CombiningKind.ADD, partial).result, sums, [r])
    loop(0, layout.m, 1, row)
    if layout.m < layout.padded_m:
        zero = arith.ConstantOp(i32, 0).result
        loop(layout.m, layout.padded_m, 1, lambda r, _: vp.store_scalar(zero, sums, [r]))
    return sums


def _define_byte_sums(module_body: ir.Block, lanes: int) -> str:
    """`llvm.func internal @spine_vnni_byte_sums_<lanes>(acc, bytes) -> acc`: each int32 lane of acc plus
    the sum of its 4 signed bytes of `bytes`, in one `vpdpbusd` against unsigned ones, where widening the
    bytes and adding took nine instructions a 64 bytes (A's row sums were 9 % of an int8 1024^3 product on
    Zen 4). Its callers inline it. Returns its name."""
    name = f"spine_vnni_byte_sums_{lanes}"
    if vp.defines(module_body, name):
        return name
    i8 = ir.IntegerType.get_signless(8)
    word = ir.VectorType.get([lanes], ir.IntegerType.get_signless(32))
    bytes_type = ir.VectorType.get([4 * lanes], i8)
    entry = vp.internal_function(module_body, name, [word, bytes_type], word)
    with ir.InsertionPoint(entry), ir.Location.unknown():
        ones = arith.ConstantOp(bytes_type, ir.DenseElementsAttr.get_splat(bytes_type, ir.IntegerAttr.get(i8, 1)))
        total = llvm.call_intrinsic(word, INTRINSICS["i8", "i32", lanes], [entry.arguments[0], ones.result,
                                                                            entry.arguments[1]], [], [])
        llvm.ReturnOp(arg=total)
    return name


def _blocks(module_body, kernel, layout: vp.Layout, row_sums, a: vp.Matrix, b: vp.Matrix, start,
            out: vp.Matrix) -> None:
    """Every register block of C: column blocks outermost (their VNNI rows of B stay in L1)."""
    name = _define_block(module_body, kernel, layout, start is not None)
    matrices = [a, b, out] + ([start] if start is not None else [])
    strides = [vp.i64(m.row_bytes) for m in matrices]
    col_bytes = kernel.vectors * kernel.lanes * vp.SUM_BYTES

    def column_block(j, _):
        def row_block(i, _):
            rows = mul(i, kernel.rows)
            addresses = [a.at(rows, 0), b.at(0, mul(j, col_bytes)), out.at(rows, mul(j, col_bytes))]
            if start is not None:
                addresses.append(start.at(rows, mul(j, col_bytes)))
            if row_sums is not None:
                addresses.append(add(vp.address(row_sums), mul(rows, 4)))
            llvm.CallOp(None, [vp.i64(x) for x in addresses] + strides, [], [], callee=ir.FlatSymbolRefAttr.get(name))
        loop(0, layout.padded_m // kernel.rows, 1, row_block)
    loop(0, layout.padded_n // (kernel.vectors * kernel.lanes), 1, column_block)


def _define_block(module_body: ir.Block, kernel, layout: vp.Layout, accumulates: bool) -> str:
    """`llvm.func internal @spine_vnni_block_<element>_k<groups>[_acc](a, b, c, [start,] [row_sums,] a_row,
    b_row, c_row [, start_row])`: i64 addresses and the bytes between their rows; one register block,
    C's rows x (vectors x lanes) = start's (`accumulates`; else zero) + A's rows times B's columns over every
    group of G k. Its one caller inlines it. Returns its name."""
    rows_, vectors, lanes = kernel.rows, kernel.vectors, kernel.lanes
    groups = layout.padded_k // layout.group
    integer = layout.element == "i8"
    name = f"spine_vnni_block_{layout.element}_{rows_}x{vectors}x{lanes}_k{groups}" + ("_acc" if accumulates else "")
    if vp.defines(module_body, name):
        return name
    i64 = ir.IntegerType.get_signless(64)
    addresses = 3 + accumulates + integer
    count = addresses + 3 + accumulates
    entry = vp.internal_function(module_body, name, [i64] * count)
    with ir.InsertionPoint(entry), ir.Location.unknown():
        args = list(entry.arguments)
        a, b, c = args[:3]
        start = args[3] if accumulates else None
        row_sums = args[3 + accumulates] if integer else None
        a_row, b_row, c_row = args[addresses:addresses + 3]
        start_row = args[addresses + 3] if accumulates else None
        sums_type = ir.Type.parse(layout.sums)
        acc_type = ir.VectorType.get([lanes], sums_type)
        operand_type = ir.VectorType.get([4 * lanes], ir.IntegerType.get_signless(8)) if integer else \
            ir.VectorType.get([2 * lanes], ir.BF16Type.get())
        i32 = ir.IntegerType.get_signless(32)
        word = ir.VectorType.get([lanes], i32)
        intrinsic = INTRINSICS[layout.element, layout.sums, lanes]
        vector_bytes = 4 * lanes

        def at(base, row, index, column_bytes):
            """base + index * row (i64 values and an index) + column_bytes, as a pointer."""
            return vp.pointer(arith.AddIOp(base, arith.MulIOp(row, vp.i64(index)).result).result, column_bytes)

        if start is None:
            first = [vp.zero_vector(acc_type)] * (rows_ * vectors)
        else:
            first = [llvm.LoadOp(acc_type, at(start, start_row, r, v * vector_bytes), alignment=4).result
                     for r in range(rows_) for v in range(vectors)]

        def step(q, accs):
            columns = [llvm.BitcastOp(operand_type, llvm.LoadOp(word, at(b, b_row, q, v * vector_bytes),
                                                                alignment=4).result).result
                       for v in range(vectors)]
            results = []
            for r in range(rows_):
                scalar = llvm.LoadOp(i32, at(a, a_row, r, mul(q, 4)), alignment=1).result
                row = llvm.BitcastOp(operand_type, vector.BroadcastOp(word, scalar).result).result
                results += [llvm.call_intrinsic(acc_type, intrinsic, [accs[r * vectors + v], columns[v], row], [], [])
                            for v in range(vectors)]
            return results
        accs = loop(0, groups, 1, step, first)
        for r in range(rows_):
            correction = None
            if integer:       # 128 times the row's sum of A: what B's unsigned bytes added
                total = llvm.LoadOp(i32, vp.pointer(row_sums, im.const(4 * r)), alignment=4).result
                shifted = arith.ShLIOp(total, arith.ConstantOp(i32, SIGN_SHIFT).result).result
                correction = vector.BroadcastOp(acc_type, shifted).result
            for v in range(vectors):
                acc = accs[r * vectors + v]
                if correction is not None:
                    acc = arith.SubIOp(acc, correction).result
                llvm.StoreOp(acc, at(c, c_row, r, v * vector_bytes), alignment=4)
        llvm.ReturnOp()
    return name
