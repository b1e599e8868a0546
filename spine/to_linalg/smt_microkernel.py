"""The packed matmul's code, emitted as one private function per operand layout: C (+)= A @ B over memrefs,
written in MLIR's vector dialect so that one emitter serves every target (spine/microkernels.py gives
the vector width, the register block and the panel layouts; scalable vectors for RVV, fixed ones for x86).

Why MLIR rather than C with intrinsics: the kernel then goes through the same lowering and LLVM codegen as
the rest of the kernel (one compile, no second compiler, inlined into the kernel), and the vector dialect
says all the inner loop needs: LLVM turns it into `vl4re32.v` + `vfmacc.vf` on RVV and `vbroadcastss` +
`vfmadd231ps` on AVX-512 without further help.

The scheme is GotoBLAS's, at the size of one smt.dot (panel layouts in smt_panels.py):

    for each block of KC reduction steps:
        pack it: B into column panels of NR = NV * VL columns, A into row panels of MR rows
        for each B panel (KC x NR: it stays in L1 across the A panels):
            for each A panel (the last one's register block has only its rows: M need not divide by MR):
                acc[MR][NV] = C panel so far (zero in the first block)      MR x NV vector registers
                for k in the block:
                    b[v] = Bp[j][k][v*VL:(v+1)*VL]       NV vector loads (one whole-group load on RVV)
                    a[r] = A panel (i, k, r)             MR scalars (broadcast)
                    acc[r][v] += a[r] * b[v]             MR * NV vector multiply-adds
                C panel = acc
    write the C panels back into C (adding C_in when accumulating)

Packing widens the inputs to the accumulator type (fp16/bf16 -> fp32, int8 -> int32), so the inner loop is
the same for every input type. An fp32 B read across its rows (x @ W^T) is packed by blocks transposed in
registers on x86 (smt_panels.pack_b). Copies are skipped where the layout allows (x86, fixed width):
A of the sums' type is read in place, its rows at their own stride, when its columns have unit stride
(checked at run time; the packed path stays for the others); so is B when its columns are exactly one
panel (NR: a small tile's, 8 x 32 x 8 as triton-cpu's tutorials take them, which spent more time packing B
than multiplying); and when the B panels tile the columns of a
row-major C_out exactly, the accumulators are stored into C_out itself (in the last block of steps, or in
every block when C_out has the sums' type), without C panels and their write-back. Given a run-time row
bound (the rows a masked tl.load keeps), no row of A past it is read and no row of C past it is touched:
the A panel the bound cuts is packed alone, zeros past the bound (_bounded_k_block). On AMD's AVX-512 cores,
a call that packs an A it could have read in place (rows a multiple of 4 KiB apart) prefetches, tile by
tile, the A and B tiles a loop over k reads next (_next_k_tiles): packing had waited on those first reads.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from typing import Optional

from mlir import ir
from mlir.dialects import arith, func, memref, scf, vector

from ..ir_names import READ_ONLY_ARGUMENT
from ..microkernels import MicroKernel
from ..ir_types import bits
from ..targets import L1_WAY_BYTES
from . import index_math as im
from . import kept_panels
from . import smt_panels as panels
from .smt_panels import Operand, add, loop, mul

DYNAMIC = ir.ShapedType.get_dynamic_size()
ALIGNMENT = 64
# Panels up to this many bytes in all live on the stack. Heap buffers of this size come from mmap, and a
# program instance that maps, touches and unmaps them pays a page fault per 4 KiB every time; stack pages
# stay mapped. Grid worker threads have 64 MiB stacks, the calling thread the process's (8 MiB by default).
STACK_PANEL_BYTES = 1 << 20
MAX_VSCALE = 16           # RVV up to VLEN 1024, for sizing panels before the vector length is known


def _symbol_part(name: str) -> str:
    """A micro-kernel's name as part of a bare MLIR symbol ("avx512-amx" would need quotes)."""
    return name.replace("-", "_")


@dataclass(frozen=True)
class PackedMatmul:
    a: Operand
    b: Operand
    c_out: Operand
    c_in: Optional[Operand]       # the accumulator added to the product, if any
    accumulator: str              # the type products are summed in
    kernel: MicroKernel
    in_place: bool = False        # C_out holds the accumulator and is updated in place
    b_panels: bool = False        # B arrives packed already (BPanels), for every block of steps
    # In place only: A's rows from a run-time count on (a last argument) are padding, as a masked tl.load
    # fills the rows past a matrix's end with zeros: they are never read, and C keeps those rows as they
    # are (their products would be zero; computed, a zero row times a B holding an infinity or NaN would
    # give NaN there). So A's tile may be a view of the matrix that ends inside it (to_linalg/load.py).
    row_bound: bool = False
    # C_out is a view of a larger matrix (a run-time row stride, unit column stride) instead of a buffer of
    # the product alone: the twin a whole tile stored straight into its destination calls
    # (compiler/products_into_destination.py). Direct, with C_out of the sums' type, only.
    strided_out: bool = False
    # A last i1 argument says whether B may be packed once for the launch on each thread, as no program
    # writes its memory (compiler/shared_panels.py): its panel is then the runtime's (cpp/shared_panels.h).
    # Matrix-unit emitters whose module has SHARES_B, and this kernel where shares_b says so.
    shared_b: bool = False

    @property
    def name(self) -> str:
        digest = hashlib.sha256(repr(self).encode()).hexdigest()[:16]
        return f"spine_smt_matmul_{_symbol_part(self.kernel.name)}_{digest}"

    def strided_twin(self) -> Optional["PackedMatmul"]:
        """This product written into a view of a larger matrix instead (else None): a product stored directly
        in C_out of the sums' type (compiler/products_into_destination.py), or an accumulator of the sums'
        type updated in place, which a loop may then carry in its destination (compiler/carried_products.py;
        matrix units only, where the emitter supports it)."""
        if self.c_in is not None or self.c_out.element != self.accumulator:
            return None
        if self.in_place:
            return replace(self, in_place=False, c_in=self.c_out, strided_out=True) if self.kernel.matrix_unit else None
        return replace(self, strided_out=True) if self.direct else None

    def shared_twin(self) -> "PackedMatmul":
        """This product with B's panel kept for the launch where its last argument says so."""
        return replace(self, shared_b=True)

    @property
    def direct(self) -> bool:
        """Whether the B panels tile C_out's columns exactly and C_out is a row-major matrix that holds the
        product alone, or, in place, the accumulator of the sums' type: then the accumulators are stored
        into C_out itself (no C panels to write back), in every block of reduction steps when it has the
        sums' type (in place: loaded from it too), else in the last one."""
        kernel, acc = self.kernel, ir.Type.parse(self.accumulator)
        if kernel.matrix_unit:
            return False
        nr = kernel.vectors * ir.VectorType(vector_type(kernel, acc)).shape[0]
        if kernel.scalable or self.c_in is not None or self.c_out.packed or self.b.cols % nr:
            return False
        return not self.in_place or ir.Type.parse(self.c_out.element) == acc

    @property
    def kc(self) -> int:
        """Reduction steps per block: whole micro tiles of a packed A (its columns come a tile at a time)."""
        run = self.a.run if self.a.packed else 1
        return min(max(1, self.kernel.kc // run) * run, self.a.cols)


@dataclass(frozen=True)
class BPanels:
    """B packed into the panels of every block of reduction steps at once, for a matmul that reuses it
    (the same B multiplied by several A, e.g. the sub-blocks of an smt.parallel loop)."""
    b: Operand
    accumulator: str
    kernel: MicroKernel
    kc: int

    @property
    def name(self) -> str:
        digest = hashlib.sha256(repr(self).encode()).hexdigest()[:16]
        return f"spine_smt_b_panels_{_symbol_part(self.kernel.name)}_{digest}"

    def size(self) -> ir.Value:
        """Elements of the panels (emitted where the caller allocates them)."""
        acc = ir.Type.parse(self.accumulator)
        nr = arith.MulIOp(_vector_length(self.kernel, vector_type(self.kernel, acc)), im.const(self.kernel.vectors)).result
        padded = arith.MulIOp(arith.CeilDivUIOp(im.const(self.b.cols), nr).result, nr).result
        return im.as_value(mul(padded, -(-self.b.rows // self.kc) * self.kc))


@dataclass(frozen=True)
class _Plan:
    """What the emitters share: types, the register block's extent, panel counts and the buffers."""
    spec: PackedMatmul
    acc: ir.Type
    vtype: ir.Type
    vl: ir.Value                 # elements per vector register (run time when scalable)
    nr: ir.Value                 # columns of a B panel: NV * vl
    panels_n: ir.Value           # ceil(N / nr)
    ap: ir.Value = None
    bp: ir.Value = None
    cp: ir.Value = None
    out: ir.Value = None         # C_out as one row of M * N elements, when the last block stores into it
    a_rows: ir.Value = None      # A read in place (not packed): a unit-stride view of it, and its row stride
    lda: ir.Value = None
    row_bound: ir.Value = None   # A's rows from here on are never read (row_bound, at most M), else None
    c_stride: ir.Value = None    # C's row stride when C_out is a view (strided_out), else the padded N
    ldb: ir.Value = None         # B read in place (bp a unit-stride view of it): its row stride, else None
    next_k: object = None        # prefetch(jp, ip): the register tile's share of the next k tile, else None
    shared: tuple = None         # (B's view, an i1): B's panels may be the thread's kept ones (shared_b)

    @property
    def kernel(self) -> MicroKernel:
        return self.spec.kernel

    @property
    def mr(self) -> int:
        return self.kernel.rows

    @property
    def nv(self) -> int:
        return self.kernel.vectors

    @property
    def k(self) -> int:
        return self.spec.a.cols

    @property
    def kc(self) -> int:
        return self.spec.kc

    @property
    def padded_n(self) -> ir.Value:
        """Columns of the C panels: N rounded up to whole B panels."""
        return arith.MulIOp(self.panels_n, self.nr).result

    @property
    def direct(self) -> bool:
        return self.spec.direct

    @property
    def a_in_place(self) -> bool:
        """Whether A may be read where it is when its columns have unit stride: a matrix of the sums' type,
        read row by row (the micro-kernel broadcasts MR scalars at a row's distance from each other, from
        L2 like a packed panel's rows)."""
        spec = self.spec
        return self.kernel.a_rows and not spec.a.packed and ir.Type.parse(spec.a.element) == self.acc

    @property
    def b_in_place(self) -> bool:
        """Whether B may be read where it is when its columns have unit stride: a matrix of the sums' type
        whose columns are exactly one panel (NR of them: a row of B is then a step's NV vectors, as in a
        packed panel), packed by each call otherwise. Small products (a tile of 8 rows by 32 columns
        over 8 steps at a time) spent more time packing B than multiplying."""
        spec = self.spec
        fixed_nr = self.kernel.vectors * ir.VectorType(self.vtype).shape[0]
        return (not self.kernel.scalable and not spec.b_panels and not spec.b.packed and spec.b.cols == fixed_nr
                and ir.Type.parse(spec.b.element) == self.acc)

    @property
    def c_panels(self) -> bool:
        """Whether sums between blocks of reduction steps need C panels of their own."""
        if not self.direct:
            return True
        return self.out_type != self.acc and self.k > self.kc

    @property
    def out_type(self) -> ir.Type:
        return ir.Type.parse(self.spec.c_out.element)

    @property
    def panels_m(self) -> int:
        return -(-self.spec.a.rows // self.mr)

    @property
    def last_rows(self) -> int:
        """Rows of the last A panel: a register block of fewer rows computes them, so no row past M is
        computed, read or stored."""
        return self.spec.a.rows - (self.panels_m - 1) * self.mr


def vector_type(kernel: MicroKernel, acc: ir.Type, vectors: int = 1) -> ir.Type:
    lanes = max(1, kernel.lanes * 32 // bits(acc)) * vectors
    return ir.VectorType.get([lanes], acc, scalable=[kernel.scalable])


def _vector_length(kernel: MicroKernel, vtype: ir.Type) -> ir.Value:
    lanes = im.const(ir.VectorType(vtype).shape[0])
    if not kernel.scalable:
        return lanes
    return arith.MulIOp(vector.VectorScaleOp().result, lanes).result


def _function(module_body: ir.Block, name: str, types: list, reads_only: int = 0):
    """`func.func private @name(types)` and its entry block; its first `reads_only` arguments marked as read
    only (READ_ONLY_ARGUMENT), which the compiler's passes may rely on at its calls."""
    with ir.InsertionPoint.at_block_begin(module_body), ir.Location.unknown():
        fn = func.FuncOp(name, ir.FunctionType.get(types, []), visibility="private")
        if reads_only:
            marked = ir.DictAttr.get({READ_ONLY_ARGUMENT: ir.UnitAttr.get()})
            fn.attributes["arg_attrs"] = ir.ArrayAttr.get([marked if i < reads_only else ir.DictAttr.get({})
                                                           for i in range(len(types))])
        # Packing copies short runs (one panel row: 32 to 128 bytes): as loops LLVM vectorises them in place,
        # where its idiom recognition would make each a call of the C library's memcpy.
        fn.attributes["passthrough"] = ir.Attribute.parse('["no-builtins"]')
        return fn, fn.add_entry_block()


def panels_type(accumulator: str) -> ir.Type:
    return ir.MemRefType.get([DYNAMIC], ir.Type.parse(accumulator))


def define(module_body: ir.Block, spec: PackedMatmul) -> None:
    """Adds `func.func private @<spec.name>(a, b, [c_in,] c_out)` to the module; c_out is a row-major buffer
    the caller allocates (or, in place, the accumulator), b may be B's panels, the others may have any
    strides."""
    b_type = panels_type(spec.accumulator) if spec.b_panels else spec.b.memref_type()
    inputs = [spec.a.memref_type(), b_type] + ([spec.c_in.memref_type()] if spec.c_in else [])
    inputs.append(spec.c_out.memref_type(contiguous=(spec.direct or not spec.in_place) and not spec.strided_out))
    if spec.row_bound:
        inputs.append(ir.IndexType.get())
    if spec.shared_b:
        inputs.append(ir.IntegerType.get_signless(1))
        kept_panels.declare(module_body)
    fn, entry = _function(module_body, spec.name, inputs, reads_only=2)
    with ir.InsertionPoint(entry), ir.Location.unknown():
        args = list(entry.arguments)
        shared = (args[1], args.pop()) if spec.shared_b else None
        rows = args.pop() if spec.row_bound else None
        _body(spec, args[0], args[1], args[2] if spec.c_in else None, args[-1], rows, shared)
        func.ReturnOp([])


def shares_b(spec: PackedMatmul) -> bool:
    """Whether the FMA kernel can keep `spec`'s B panels for the launch (PackedMatmul.shared_b): B a plain
    matrix packed by each call. On RVV a panel's size and layout follow the vector length, which one process
    never sees change, and kept panels live no longer than a launch."""
    return not spec.kernel.matrix_unit and not spec.b_panels and not spec.b.packed


def define_b_panels(module_body: ir.Block, spec: BPanels) -> None:
    """Adds `func.func private @<spec.name>(b, panels)`, packing every block of B's reduction steps."""
    fn, entry = _function(module_body, spec.name, [spec.b.memref_type(), panels_type(spec.accumulator)])
    with ir.InsertionPoint(entry), ir.Location.unknown():
        b, bp = entry.arguments
        acc = ir.Type.parse(spec.accumulator)
        vtype = vector_type(spec.kernel, acc)
        nr = arith.MulIOp(_vector_length(spec.kernel, vtype), im.const(spec.kernel.vectors)).result
        panels_n = arith.CeilDivUIOp(im.const(spec.b.cols), nr).result
        group = vector_type(spec.kernel, acc, spec.kernel.vectors)
        block = mul(mul(panels_n, nr), spec.kc)
        full, tail = divmod(spec.b.rows, spec.kc)
        if full:
            loop(0, full, 1, lambda kb, _: panels.pack_b(spec.b, b, bp, nr, panels_n, mul(kb, spec.kc), spec.kc,
                                                         spec.kc, group, mul(kb, block), spec.kernel.transpose_lanes))
        if tail:
            panels.pack_b(spec.b, b, bp, nr, panels_n, full * spec.kc, tail, spec.kc, group, mul(full, block),
                          spec.kernel.transpose_lanes)
        func.ReturnOp([])


def _alloc(size, elem: ir.Type, on_stack: bool) -> ir.Value:
    alloc = memref.AllocaOp if on_stack else memref.AllocOp
    return alloc(ir.MemRefType.get([DYNAMIC], elem), [im.as_value(size)], [], alignment=ALIGNMENT).result


def _panel_bytes(plan: "_Plan") -> int:
    """An upper bound of the A, B and C panels' size, at the largest vector length."""
    kernel = plan.kernel
    nr = kernel.vectors * kernel.lanes * (MAX_VSCALE if kernel.scalable else 1)
    padded_n = -(-plan.spec.b.cols // nr) * nr
    padded_m = plan.panels_m * plan.mr
    c_panels = padded_m * padded_n if plan.c_panels else 0
    return (padded_n * plan.kc + padded_m * plan.kc + c_panels) * bits(plan.acc) // 8


def _body(spec: PackedMatmul, a, b, c_in, c_out, rows=None, shared=None) -> None:
    acc = ir.Type.parse(spec.accumulator)
    vtype = vector_type(spec.kernel, acc)
    vl = _vector_length(spec.kernel, vtype)
    nr = arith.MulIOp(vl, im.const(spec.kernel.vectors)).result
    panels_n = arith.CeilDivUIOp(im.const(spec.b.cols), nr).result
    plan = _Plan(spec, acc, vtype, vl, nr, panels_n)
    kc, mr = plan.kc, plan.mr
    on_stack = _panel_bytes(plan) <= STACK_PANEL_BYTES
    bp = b if spec.b_panels else _alloc(mul(mul(panels_n, nr), kc), acc, on_stack)
    ap = _alloc(plan.panels_m * mr * kc, acc, on_stack)
    c_stride = None
    if plan.direct and spec.strided_out:
        out, c_stride, _ = _rows_view(c_out)
    else:
        out = _flat(c_out, spec.c_out) if plan.direct else None
    if plan.c_panels:
        cp = _alloc(mul(mul(panels_n, nr), plan.panels_m * mr), acc, on_stack)     # C, rows padded to panels
    else:
        cp = out
    assert rows is None or spec.in_place, "rows past the bound are left as they are: C must be the accumulator"
    if rows is not None:
        rows = arith.MinUIOp(rows, im.const(spec.a.rows)).result
    plan = _Plan(spec, acc, vtype, vl, nr, panels_n, ap, bp, cp, out, row_bound=rows, c_stride=c_stride, shared=shared)
    _in_place_or_packed(plan, plan.b_in_place, b, "ldb", lambda plan_b: _in_place_or_packed(
        plan_b, plan_b.a_in_place, a, "lda", lambda plan_ab: _k_blocks(plan_ab, a, b)))
    if not plan.direct:
        panels.write_back(spec.c_out, c_out, spec.c_in, c_in, cp, plan.padded_n, acc, spec.in_place, rows)


def _in_place_or_packed(plan: _Plan, possible: bool, x, stride: str, emit) -> None:
    """emit(plan) once, or, where operand x (A: stride "lda", B: "ldb") may be read in place, twice: with
    the plan reading it in place when its columns have unit stride (checked at run time), and as it is."""
    if not possible:
        emit(plan)
        return
    view, step, unit = _rows_view(x)
    in_place = replace(plan, **({"a_rows": view, "lda": step} if stride == "lda" else {"bp": view, "ldb": step}))
    panels.branches(unit, lambda unit_stride: emit(in_place if unit_stride else plan))


def _rows_view(a) -> tuple:
    """(a unit-stride 1-D view of a matrix from its first element, its row stride, whether to read it in
    place: its columns have unit stride and its rows are not a multiple of L1_WAY_BYTES apart)."""
    meta = memref.ExtractStridedMetadataOp(a)
    offset, (rows, cols), (lda, step) = meta.results[1], meta.results[2:4], meta.results[4:6]
    size = add(mul(arith.SubIOp(rows, im.const(1)).result, lda), cols)
    elem = ir.MemRefType(a.type).element_type
    view_type = ir.MemRefType.get([DYNAMIC], elem, layout=ir.StridedLayoutAttr.get(panels.DYNAMIC_STRIDE, [1]))
    view = memref.ReinterpretCastOp(view_type, meta.results[0], [offset], [size], [],
                                    ir.DenseI64ArrayAttr.get([panels.DYNAMIC_STRIDE]),
                                    ir.DenseI64ArrayAttr.get([DYNAMIC]), ir.DenseI64ArrayAttr.get([1])).result
    unit = arith.CmpIOp(arith.CmpIPredicate.eq, step, im.const(1)).result
    # Rows a multiple of 4 KiB apart share one L1 set: MR of them beside the B panel's lines evict each other
    # (1024 columns of fp32 ran no faster than packing); those are packed.
    width = bits(elem) // 8
    spread = arith.CmpIOp(arith.CmpIPredicate.ne, arith.RemUIOp(lda, im.const(L1_WAY_BYTES // width)).result,
                          im.const(0)).result
    return view, lda, arith.AndIOp(unit, spread).result


def _next_k_tiles(plan: _Plan, a, b):
    """prefetch(jp, ip): register tile (ip, jp)'s share of the lines of the tiles right after A's (its
    rows, the next K columns) and below B's (the next K rows): what `acc += tl.dot(a, b)` over k loads
    next. Tile t of T = panels_m * panels_n takes A's rows t * ceil(M / T) on and B's t * ceil(K / T) on.
    Only the call that packs an A it could not read in place takes it: at 1024^3 fp32 (A's rows 4 KiB apart)
    the tutorial's matmul on Zen 4 ran 2-4 % faster with it, and at 512^3, where A is read in place, calls
    that prefetched were 1-6 % slower; on a Sapphire Rapids Xeon it was 3-5 % slower at 1024^3, so only
    AMD's entry takes it (bench/RESULTS.md). The tiles are taken to have their columns next to each other;
    where they do not, or no next tile exists, the lines are other data or no mapping: a prefetch neither
    faults nor changes memory."""
    spec = plan.spec
    m, k, n = spec.a.rows, spec.a.cols, spec.b.cols
    nr = plan.kernel.vectors * ir.VectorType(plan.vtype).shape[0]
    tiles = -(-n // nr) * plan.panels_m
    a_row, b_row = _row_lines(a, (m - 1, 2 * k)), _row_lines(b, (2 * k - 1, n))
    a_rows, b_rows = -(-m // tiles), -(-k // tiles)

    def prefetch(jp, ip):
        t = add(mul(jp, plan.panels_m), ip)
        for r in range(a_rows):
            a_row(add(mul(t, a_rows), r), k, k)
        for r in range(b_rows):
            b_row(add(add(mul(t, b_rows), r), k), 0, n)
    return prefetch


def _row_lines(x, last: tuple):
    """fetch(row, col, count): prefetches of the cache lines of `count` elements of x's row `row` from
    column `col` on, through a 1-D view of x's buffer that reaches x[last] (x's rows and columns extended
    past its shape: the next tile lies there)."""
    meta = memref.ExtractStridedMetadataOp(x)
    offset, lda = meta.results[1], meta.results[4]
    elem = ir.MemRefType(x.type).element_type
    per_line = 512 // bits(elem)
    size = add(add(offset, mul(last[0], lda)), last[1])
    flat = ir.MemRefType.get([DYNAMIC], elem)
    view = memref.ReinterpretCastOp(flat, meta.results[0], [], [size], [], ir.DenseI64ArrayAttr.get([0]),
                                    ir.DenseI64ArrayAttr.get([DYNAMIC]), ir.DenseI64ArrayAttr.get([1])).result

    def fetch(row, col, count: int) -> None:
        start = add(add(offset, mul(row, lda)), col)
        for line in range(-(-count // per_line)):
            memref.PrefetchOp(view, [im.as_value(add(start, line * per_line))], False, 3, True)
    return fetch


def _prefetched_tile(plan: _Plan, ip, jp, *args) -> None:
    if plan.next_k is not None:
        plan.next_k(jp, ip)
    _tile(plan, ip, jp, *args)


def _k_blocks(plan: _Plan, a, b) -> None:
    """Every block of reduction steps; the next k tile prefetched where A could have been read in place
    and is packed (_next_k_tiles)."""
    if (plan.kernel.prefetch_next_k and plan.a_in_place and plan.a_rows is None and not plan.spec.b_panels
            and plan.k <= plan.kc):
        plan = replace(plan, next_k=_next_k_tiles(plan, a, b))
    kc, acc = plan.kc, plan.acc
    full, tail = divmod(plan.k, kc)
    # The last block stores into a C_out of another type than the sums: it is peeled off the loop.
    peel = plan.direct and plan.out_type != acc and not tail
    if full - peel:
        loop(0, full - peel, 1, lambda kb, _: _k_block(plan, a, b, kb, kc, _is_zero(kb)))
    if peel:
        _k_block(plan, a, b, im.const(full - 1), kc, full == 1, last=True)
    if tail:
        _k_block(plan, a, b, im.const(full), tail, full == 0, last=True)


def _flat(c_out, c_op: Operand) -> ir.Value:
    """A row-major C_out as one row of M * N elements."""
    flat = ir.MemRefType.get([c_op.rows * c_op.cols], ir.Type.parse(c_op.element))
    return memref.CollapseShapeOp(flat, c_out, ir.ArrayAttr.parse("[[0, 1]]")).result


def _is_zero(index: ir.Value) -> ir.Value:
    return arith.CmpIOp(arith.CmpIPredicate.eq, index, im.const(0)).result


def _k_block(plan: _Plan, a, b, kb, steps: int, first, last: bool = False) -> None:
    """`steps` reduction steps from kb * KC: pack them (B only if it is not packed already), then run every
    (B panel, A panel) pair."""
    spec, k0 = plan.spec, mul(kb, plan.kc)
    block = mul(mul(plan.panels_n, plan.nr), plan.kc)
    if spec.b_panels:
        b_block = mul(kb, block)               # this block's panels among all of them
    elif plan.ldb is not None:
        b_block = mul(k0, plan.ldb)            # B in place: this block's first row
    else:
        b_block = 0

        def pack(bp):
            panels.pack_b(spec.b, b, bp, plan.nr, plan.panels_n, k0, steps, plan.kc,
                          vector_type(plan.kernel, plan.acc, plan.nv), transpose=plan.kernel.transpose_lanes)
        if plan.shared is None:
            pack(plan.bp)
        else:
            plan = replace(plan, bp=_kept_block(plan, k0, steps, block, pack))
    if plan.row_bound is not None:
        _bounded_k_block(plan, a, k0, b_block, steps, first, last)
        return
    if plan.a_rows is None:
        pack_a = panels.pack_a_rows if plan.kernel.a_rows else panels.pack_a_k_major
        pack_a(spec.a, a, plan.ap, plan.mr, k0, steps, plan.kc, plan.acc)

    full = plan.panels_m - (plan.last_rows < plan.mr)

    def column_panel(jp, _):
        if full:
            loop(0, full, 1, lambda ip, _: _prefetched_tile(plan, ip, jp, k0, b_block, steps, first, last))
        if full < plan.panels_m:
            _tile(plan, im.const(full), jp, k0, b_block, steps, first, last, plan.last_rows)
    loop(0, plan.panels_n, 1, column_panel)


def _kept_block(plan: _Plan, k0, steps: int, elements, pack) -> ir.Value:
    """This block of reduction steps' B panels (`elements` of the sums' type) as a view of the thread's kept
    panels for B's rows k0 .. k0 + steps, where the call may keep them (packed by `pack` unless an earlier
    program packed them in this launch), else of the call's own panels, packed."""
    source, may_share = plan.shared
    width = bits(plan.acc) // 8
    word = kept_panels.packing_word("fma", plan.spec.b, plan.spec.accumulator, plan.kernel.name, plan.kc, steps)
    local = memref.ExtractAlignedPointerAsIndexOp(plan.bp).result
    address = kept_panels.panel_address(source, k0, bits(ir.MemRefType(source.type).element_type) // 8, word,
                                        mul(elements, width), may_share,
                                        lambda at: pack(kept_panels.memref_at(at, plan.acc, elements)), local)
    return kept_panels.memref_at(address, plan.acc, elements)


def _bounded_k_block(plan: _Plan, a, k0, b_block, steps: int, first, last: bool) -> None:
    """_k_block's A panels for a run-time row bound: the panels wholly below it as usual, then, when the
    bound falls inside a panel, that panel packed alone with zeros past the bound, computed by a register
    block that reads and writes only C's rows below it. No row of A from the bound on is read. A bound at
    M itself, where M ends inside a panel, takes the register block of the last rows, as without a bound."""
    mr = plan.mr
    whole = arith.DivUIOp(plan.row_bound, im.const(mr)).result
    part = arith.SubIOp(plan.row_bound, mul(whole, mr)).result
    if plan.a_rows is None:
        pack_a = panels.pack_a_rows if plan.kernel.a_rows else panels.pack_a_k_major
        pack_a(plan.spec.a, a, plan.ap, mr, k0, steps, plan.kc, plan.acc, whole)
    has_part = arith.CmpIOp(arith.CmpIPredicate.ne, part, im.const(0)).result
    at_m = None
    if plan.last_rows < mr:
        at_m = arith.CmpIOp(arith.CmpIPredicate.eq, plan.row_bound, im.const(plan.spec.a.rows)).result
    packed = replace(plan, a_rows=None)
    last_panel = im.const(plan.panels_m - 1)

    def pack_part(exact: bool):
        panel, valid = (last_panel, plan.last_rows) if exact else (whole, part)
        panels.pack_a_panel_rows(plan.spec.a, a, plan.ap, mr, panel, valid, k0, steps, plan.kc, plan.acc,
                                 plan.kernel.a_rows)

    def tile_part(jp):
        def emit(exact: bool):
            if exact:
                _tile(packed, last_panel, jp, k0, b_block, steps, first, last, plan.last_rows)
            else:
                _tile(packed, whole, jp, k0, b_block, steps, first, last, valid=part)
        return emit

    _if(has_part, lambda: _either(at_m, pack_part))

    def column_panel(jp, _):
        loop(0, whole, 1, lambda ip, _: _prefetched_tile(plan, ip, jp, k0, b_block, steps, first, last))
        _if(has_part, lambda: _either(at_m, tile_part(jp)))
    loop(0, plan.panels_n, 1, column_panel)


def _if(condition: ir.Value, then) -> None:
    branch = scf.IfOp(condition)
    with ir.InsertionPoint(branch.then_block):
        then()
        scf.YieldOp([])


def _either(condition, emit) -> None:
    """emit(True) where `condition` holds, else emit(False) (only that when there is no condition)."""
    if condition is None:
        emit(False)
    else:
        panels.branches(condition, emit)


# ---------------------------------------------------------------------------------------- the kernel

def _tile(plan: _Plan, ip, jp, k0, b_block, steps: int, first, last: bool = False, rows: int = 0,
          valid=None) -> None:
    """One MR x NR block of C (`rows` x NR for the last rows) for one block of reduction steps, held in
    MR x NV vector registers. `valid`: a run-time count of the block's rows that C_out has (the others are
    computed from zero rows of A and neither loaded from nor stored to C_out)."""
    kc, rows = plan.kc, rows or plan.mr
    c_at = (mul(ip, plan.mr), mul(jp, plan.nr))                    # the block's first row and column
    accs = _initial(plan, c_at, first, rows, valid if plan.cp is plan.out else None)
    if plan.a_rows is not None:
        a_base, a_step, a_row = add(mul(mul(ip, plan.mr), plan.lda), k0), 1, plan.lda
    elif plan.kernel.a_rows:
        a_base, a_step, a_row = mul(ip, plan.mr * kc), 1, kc
    else:
        a_base, a_step, a_row = mul(ip, kc * plan.mr), plan.mr, 1
    b_base = add(b_block, mul(mul(jp, kc), plan.nr))
    b_step = plan.nr if plan.ldb is None else plan.ldb    # a panel's rows, or B's own (one panel: jp is 0)
    unroll = plan.kernel.unroll
    main = steps - steps % unroll

    def body(count: int):
        def run(t, carried):
            for u in range(count):
                step = add(t, u)
                carried = _step(plan, add(a_base, mul(step, a_step)), a_row, add(b_base, mul(step, b_step)),
                                carried, rows)
            return carried
        return run
    if main:
        accs = loop(0, main, unroll, body(unroll), accs)
    if steps % unroll:
        accs = loop(main, steps, 1, body(1), accs)
    into, elem = plan.cp, plan.acc
    if last and plan.out is not None:
        into, elem = plan.out, plan.out_type
    if valid is None or into is not plan.out:
        for i, value in enumerate(accs):
            vector.StoreOp(panels.convert(value, elem), into, [_c_index(plan, c_at, i)])
        return
    for r in range(rows):
        def store_row(r=r):
            for i in range(r * plan.nv, (r + 1) * plan.nv):
                vector.StoreOp(panels.convert(accs[i], elem), into, [_c_index(plan, c_at, i)])
        _if(panels.below(r, valid), store_row)


def _c_index(plan: _Plan, c_at, i: int) -> ir.Value:
    """Where accumulator i (row r, vector v) of the block at c_at lives in the C panels."""
    r, v = divmod(i, plan.nv)
    row, col = c_at
    stride = plan.c_stride if plan.c_stride is not None else plan.padded_n
    return add(mul(add(row, r), stride), col, mul(v, plan.vl))


def _initial(plan: _Plan, c_at, first, rows: int, valid=None) -> list:
    """The accumulators: zero in the first block of reduction steps, else the C panel so far (C_out
    itself, always, when it is the accumulator). `valid`: C_out's rows below it only are loaded."""
    count = rows * plan.nv
    if plan.spec.in_place and plan.direct:
        first = False
    if first is True:
        return [vector.BroadcastOp(plan.vtype, panels.zero(plan.acc)).result] * count

    def loaded():
        if valid is not None:
            return [v for r in range(rows) for v in _row_if_valid(plan, c_at, r, valid)]
        return [vector.LoadOp(plan.vtype, plan.cp, [_c_index(plan, c_at, i)]).result for i in range(count)]
    if first is False:
        return loaded()
    branch = scf.IfOp(first, [plan.vtype] * count, has_else=True)
    with ir.InsertionPoint(branch.then_block):
        scf.YieldOp([vector.BroadcastOp(plan.vtype, panels.zero(plan.acc)).result] * count)
    with ir.InsertionPoint(branch.else_block):
        scf.YieldOp(loaded())
    return list(branch.results)


def _row_if_valid(plan: _Plan, c_at, r: int, valid) -> list:
    """Accumulator row r of the block at c_at loaded from C, or zero when C has no such row."""
    branch = scf.IfOp(panels.below(r, valid), [plan.vtype] * plan.nv, has_else=True)
    with ir.InsertionPoint(branch.then_block):
        scf.YieldOp([vector.LoadOp(plan.vtype, plan.cp, [_c_index(plan, c_at, i)]).result
                     for i in range(r * plan.nv, (r + 1) * plan.nv)])
    with ir.InsertionPoint(branch.else_block):
        scf.YieldOp([vector.BroadcastOp(plan.vtype, panels.zero(plan.acc)).result] * plan.nv)
    return list(branch.results)


def _step(plan: _Plan, a_at, a_row, b_at, accs: list, rows: int) -> list:
    """One reduction step: NV vectors of B, `rows` scalars of A, rows * NV multiply-adds."""
    bvecs = _load_b(plan, b_at)
    out = list(accs)
    a_src = plan.ap if plan.a_rows is None else plan.a_rows
    for r in range(rows):
        scalar = memref.LoadOp(a_src, [add(a_at, mul(r, a_row))]).result
        splat = vector.BroadcastOp(plan.vtype, scalar).result
        for v in range(plan.nv):
            i = r * plan.nv + v
            out[i] = _multiply_add(plan.kernel, splat, bvecs[v], out[i])
    return out


def _load_b(plan: _Plan, at) -> list:
    """The NV vectors of B for one step. Scalable: one load of the whole group, split into registers (one
    whole-register-group load on RVV instead of NV loads, each needing its own address)."""
    kernel = plan.kernel
    if kernel.scalable and plan.nv > 1:
        group = vector.LoadOp(vector_type(kernel, plan.acc, plan.nv), plan.bp, [at]).result
        lanes = ir.VectorType(plan.vtype).shape[0]
        return [vector.ScalableExtractOp(plan.vtype, group, v * lanes).result for v in range(plan.nv)]
    return [vector.LoadOp(plan.vtype, plan.bp, [add(at, mul(v, plan.vl))]).result for v in range(plan.nv)]


def _multiply_add(kernel: MicroKernel, x, y, acc) -> ir.Value:
    elem = ir.VectorType(acc.type).element_type
    if isinstance(elem, ir.IntegerType):
        return arith.AddIOp(acc, arith.MulIOp(x, y).result).result
    if kernel.fma:
        return vector.FMAOp(x, y, acc).result
    return arith.AddFOp(acc, arith.MulFOp(x, y).result).result
