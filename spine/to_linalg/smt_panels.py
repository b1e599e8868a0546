"""Moving data between a packed matmul's operands and its panels (smt_microkernel.py): packing A and B
into the panels the micro-kernel reads, and writing the accumulator panels back into C.

Panels hold one block of KC reduction steps (k0 .. k0+KC) at a time:

    B panels   Bp[jp][t][0:NR]                 columns jp*NR .. jp*NR+NR of B, zero past N
    A panels   k-major:   Ap[ip][t][0:MR]      rows ip*MR .. ip*MR+MR of A, zero past M (RVV: the MR
                                               scalars of one step are next to each other, so each load
                                               has a small immediate offset from one pointer)
               row-major: Ap[ip][r][0:KC]      the same rows, row by row (x86: broadcasts address each row
                                               at a constant displacement; packing is then a plain copy)
    C panels   Cp[row][0:padded N]             C in the accumulator type, rows and columns padded to whole
                                               panels, across all blocks

Every copy runs along columns that are contiguous in both the operand and the panel (within one micro
tile when the operand is packed), so LLVM vectorises it; values are widened to the accumulator type on
the way in and converted to C's type on the way out.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from mlir import ir
from mlir.dialects import arith, memref, scf, vector

from ..ir_types import bits
from . import index_math as im
from .tile_copy import copy_by_blocks

DYNAMIC_STRIDE = ir.ShapedType.get_dynamic_stride_or_offset()


@dataclass(frozen=True)
class Operand:
    """A matrix operand as stored: [rows, cols], or packed micro tiles [R1, C1, p0, p1]."""
    shape: tuple
    element: str                  # MLIR type text (types are context-bound; text is not)

    @property
    def packed(self) -> bool:
        return len(self.shape) == 4

    @property
    def rows(self) -> int:
        return self.shape[0] * self.shape[2] if self.packed else self.shape[0]

    @property
    def cols(self) -> int:
        return self.shape[1] * self.shape[3] if self.packed else self.shape[1]

    @property
    def run(self) -> int:
        """Columns that follow each other in memory along a row (within one micro tile when packed)."""
        return self.shape[3] if self.packed else self.cols

    def memref_type(self, contiguous: bool = False, unit_columns: bool = False) -> ir.Type:
        """Any strides (an operand may be a view of an argument), or row-major (a buffer we allocate), or
        any row stride with the columns next to each other (`unit_columns`: a view of a row-major matrix)."""
        rank = len(self.shape)
        if contiguous:
            return ir.MemRefType.get(list(self.shape), ir.Type.parse(self.element))
        strides = [DYNAMIC_STRIDE] * (rank - 1) + [1 if unit_columns else DYNAMIC_STRIDE]
        layout = ir.StridedLayoutAttr.get(DYNAMIC_STRIDE, strides)
        return ir.MemRefType.get(list(self.shape), ir.Type.parse(self.element), layout=layout)

    def at(self, row, col) -> list:
        """The memref indices of element (row, col); the next columns stay contiguous within a run."""
        if not self.packed:
            return [im.as_value(row), im.as_value(col)]
        p0, p1 = self.shape[2], self.shape[3]
        return [im.as_value(x) for x in (div(row, p0), div(col, p1), rem(row, p0), rem(col, p1))]


# ------------------------------------------------------------------------------------------- helpers

def div(x, d: int):
    if isinstance(x, int):
        return x // d
    return x if d == 1 else arith.DivUIOp(x, im.const(d)).result


def rem(x, d: int):
    if isinstance(x, int):
        return x % d
    return im.const(0) if d == 1 else arith.RemUIOp(x, im.const(d)).result


def add(*terms):
    total = 0
    for t in terms:
        total = im.add(total, t)
    return im.as_value(total)


def mul(a, b):
    return im.mul(a, b)


def loop(lb, ub, step, body: Callable, inits=()) -> list:
    """scf.for; body(iv, carried) returns the values to carry on (or None)."""
    op = scf.ForOp(im.as_value(lb), im.as_value(ub), im.as_value(step), list(inits))
    with ir.InsertionPoint(op.body):
        scf.YieldOp(list(body(op.induction_variable, list(op.inner_iter_args)) or []))
    return list(op.results)


def convert(value: ir.Value, to: ir.Type) -> ir.Value:
    """A scalar or vector converted to another element type `to` (widened, narrowed, or int <-> float)."""
    is_vector = isinstance(value.type, ir.VectorType)
    source = ir.VectorType(value.type).element_type if is_vector else value.type
    if source == to:
        return value
    result = ir.VectorType.get(ir.VectorType(value.type).shape, to,
                               scalable=ir.VectorType(value.type).scalable_dims) if is_vector else to
    src_int, dst_int = isinstance(source, ir.IntegerType), isinstance(to, ir.IntegerType)
    if src_int and dst_int:
        op = arith.ExtSIOp if source.width < to.width else arith.TruncIOp
    elif src_int:
        op = arith.SIToFPOp
    elif dst_int:
        op = arith.FPToSIOp
    else:
        op = arith.ExtFOp if bits(source) < bits(to) else arith.TruncFOp
    return op(result, value).result


def zero(ty: ir.Type) -> ir.Value:
    if isinstance(ty, ir.IntegerType):
        return arith.ConstantOp(ty, 0).result
    return arith.ConstantOp(ty, 0.0).result


def plus(x: ir.Value, y: ir.Value) -> ir.Value:
    elem = x.type.element_type if isinstance(x.type, ir.VectorType) else x.type
    return (arith.AddIOp if isinstance(elem, ir.IntegerType) else arith.AddFOp)(x, y).result


def column_chunk(operands, nr: ir.Value) -> ir.Value:
    """Columns moved at a time between operands and a panel: contiguous in all of them and never crossing
    a panel's edge (micro-tile widths and panel widths are powers of two: the smaller divides the other)."""
    chunk = nr
    for operand in operands:
        if operand is not None and operand.packed:
            chunk = arith.MinUIOp(im.const(operand.run), chunk).result
    return chunk


def below(r: int, count: ir.Value) -> ir.Value:
    """i1: row r of a panel is among its first `count` (a run-time count of the rows it has)."""
    return arith.CmpIOp(arith.CmpIPredicate.ult, im.const(r), count).result


def fill(dst, start, step: int, count, value: ir.Value) -> None:
    """dst[start + t * step] = value for t < count."""
    def one(t, _):
        memref.StoreOp(value, dst, [add(start, mul(t, step))])
    loop(0, count, 1, one)


@dataclass(frozen=True)
class Run:
    """`count` consecutive elements src[at, with its last index + t] of a row. Operands arrive with run-time
    strides (views of kernel arguments) and LLVM vectorises a copy only where it knows the stride is one,
    so each run is also seen through a unit-stride view, valid where `unit` holds (tested once per run)."""
    src: ir.Value
    at: list
    view: Optional[ir.Value] = None     # None: src is row-major already
    unit: Optional[ir.Value] = None     # i1: the last dimension has unit stride

    def load(self, t, fast: bool) -> ir.Value:
        if fast and self.view is not None:
            return memref.LoadOp(self.view, [t]).result
        return memref.LoadOp(self.src, self.at[:-1] + [add(self.at[-1], t)]).result

    def store(self, value: ir.Value, t, fast: bool) -> None:
        if fast and self.view is not None:
            memref.StoreOp(value, self.view, [t])
        else:
            memref.StoreOp(value, self.src, self.at[:-1] + [add(self.at[-1], t)])


def run_of(src, at: list, count) -> Run:
    if not isinstance(ir.MemRefType(src.type).layout, ir.StridedLayoutAttr):
        return Run(src, at)
    meta = memref.ExtractStridedMetadataOp(src)
    rank = len(at)
    offset, strides = meta.results[1], list(meta.results[2 + rank:])
    start = add(offset, *[arith.MulIOp(i, st).result for i, st in zip(at, strides)])
    unit = arith.CmpIOp(arith.CmpIPredicate.eq, strides[-1], im.const(1)).result
    dynamic = ir.ShapedType.get_dynamic_size()
    view_type = ir.MemRefType.get([dynamic], ir.MemRefType(src.type).element_type,
                                  layout=ir.StridedLayoutAttr.get(DYNAMIC_STRIDE, [1]))
    view = memref.ReinterpretCastOp(view_type, meta.results[0], [start], [im.as_value(count)], [],
                                    ir.DenseI64ArrayAttr.get([DYNAMIC_STRIDE]), ir.DenseI64ArrayAttr.get([dynamic]),
                                    ir.DenseI64ArrayAttr.get([1])).result
    return Run(src, at, view, unit)


def versioned(runs, body: Callable[[bool], None]) -> None:
    """body(True) where every run has unit stride, body(False) otherwise."""
    units = [r.unit for r in runs if r is not None and r.unit is not None]
    if not units:
        body(True)
        return
    condition = units[0]
    for unit in units[1:]:
        condition = arith.AndIOp(condition, unit).result
    branches(condition, body)


def branches(condition: ir.Value, body: Callable[[bool], None]) -> None:
    """body(True) where the i1 `condition` holds, body(False) elsewhere."""
    branch = scf.IfOp(condition, has_else=True)
    with ir.InsertionPoint(branch.then_block):
        body(True)
        scf.YieldOp([])
    with ir.InsertionPoint(branch.else_block):
        body(False)
        scf.YieldOp([])


def copy_run(src, src_at: list, dst, dst_start, count, acc: ir.Type) -> None:
    """dst[dst_start + t] = src[src_at, last index + t] for t < count, widened to acc."""
    run = run_of(src, src_at, count)

    def copy(fast: bool):
        def one(t, _):
            memref.StoreOp(convert(run.load(t, fast), acc), dst, [add(dst_start, t)])
        loop(0, count, 1, one)
    versioned([run], copy)


# ----------------------------------------------------------------------------------------- B panels

def pack_b(b_op: Operand, b, bp, nr: ir.Value, panels_n: ir.Value, k0, steps: int, kc: int,
           group: ir.Type, base=0, transpose: int = 0) -> None:
    """Bp[base + (jp * KC + t) * NR + c] = B[k0 + t, jp * NR + c] for t < steps, zero past N: row by row of B
    (each row read once, in order; panel by panel would read every row again for each panel). A panel row
    that is whole and contiguous in B is one vector load and store of `group` (NR lanes); others are copied
    in runs. The whole panels come first, in a loop of their own; the last, partial one after them.

    `transpose`: the block (in elements) this target transposes in registers (tile_copy.py; 0: none). When B
    is read across its source's rows (unit stride along k: nn.Linear's weight as B of x @ W^T), the whole
    panels are then packed by such blocks, a source row of k per load, instead of an element per row."""
    n = b_op.cols
    acc = ir.VectorType(group).element_type
    chunk = column_chunk([b_op], nr)
    whole_rows = arith.CmpIOp(arith.CmpIPredicate.eq, chunk, nr).result if b_op.packed else None
    full = arith.DivUIOp(im.const(n), nr).result

    def panel_row(t, jp, valid, whole: bool):
        col0 = arith.MulIOp(jp, nr).result
        dst = add(base, mul(add(mul(jp, kc), t), nr))
        run = run_of(b, b_op.at(add(k0, t), col0), nr)
        conditions = [c for c in (whole_rows, run.unit) if c is not None]
        fast = conditions[0] if conditions else None
        for c in conditions[1:]:
            fast = arith.AndIOp(fast, c).result

        def vector_copy():
            source = run.view if run.view is not None else b
            at = [im.const(0)] if run.view is not None else run.at
            elements = ir.VectorType.get(ir.VectorType(group).shape, ir.MemRefType(b.type).element_type,
                                         scalable=ir.VectorType(group).scalable_dims)
            vector.StoreOp(convert(vector.LoadOp(elements, source, at).result, acc), bp, [dst])

        def run_copy():
            def piece(c0, _):
                count = arith.MinUIOp(arith.SubIOp(valid, c0).result, chunk).result
                copy_run(b, b_op.at(add(k0, t), add(col0, c0)), bp, add(dst, c0), count, acc)
            loop(0, valid, chunk, piece)
            fill(bp, add(dst, valid), 1, arith.SubIOp(nr, valid).result, zero(acc))
        if not whole:
            run_copy()
            return
        if fast is None:
            vector_copy()
            return
        branches(fast, lambda vectors: vector_copy() if vectors else run_copy())

    def row(t, whole_panels: bool):
        if whole_panels:
            loop(0, full, 1, lambda jp, _: panel_row(t, jp, nr, True))
        last = arith.CmpIOp(arith.CmpIPredicate.ult, full, panels_n).result
        branch = scf.IfOp(last)
        with ir.InsertionPoint(branch.then_block):
            valid = arith.SubIOp(im.const(n), arith.MulIOp(full, nr).result).result
            panel_row(t, full, valid, False)
            scf.YieldOp([])

    block = _transposing_block(b_op, b, group, steps, transpose)
    if not block:
        loop(0, steps, 1, lambda t, _: row(t, True))
        return
    across = _unit_stride_along_k(b)
    branch = scf.IfOp(across, has_else=True)
    with ir.InsertionPoint(branch.then_block):
        loop(0, full, 1, lambda jp, _: _transposed_panel(b, bp, jp, k0, steps, kc, group, base, block))
        loop(0, steps, 1, lambda t, _: row(t, False))
        scf.YieldOp([])
    with ir.InsertionPoint(branch.else_block):
        loop(0, steps, 1, lambda t, _: row(t, True))
        scf.YieldOp([])


def _transposing_block(b_op: Operand, b, group: ir.Type, steps: int, transpose: int) -> int:
    """The block whole panels are transposed by in registers, where B allows it (0: not)."""
    group = ir.VectorType(group)
    nr = group.shape[0]
    if (not transpose or b_op.packed or any(group.scalable_dims) or nr % transpose or steps % transpose
            or ir.MemRefType(b.type).element_type != group.element_type or bits(group.element_type) != 32):
        return 0
    return transpose


def _unit_stride_along_k(b) -> ir.Value:
    meta = memref.ExtractStridedMetadataOp(b)
    k_stride, n_stride = meta.results[4:6]
    along_k = arith.CmpIOp(arith.CmpIPredicate.eq, k_stride, im.const(1)).result
    across = arith.CmpIOp(arith.CmpIPredicate.ne, n_stride, im.const(1)).result
    return arith.AndIOp(along_k, across).result


def _transposed_panel(b, bp, jp, k0, steps: int, kc: int, group: ir.Type, base, block: int) -> None:
    """Panel jp's `steps` rows from k0, B's unit stride along k: its NR source rows (B's columns) are read
    `block` elements at a time and transposed in registers (tile_copy.copy_by_blocks)."""
    nr = ir.VectorType(group).shape[0]
    elem = ir.MemRefType(b.type).element_type
    meta = memref.ExtractStridedMetadataOp(b)
    offset, n_stride = meta.results[1], meta.results[5]
    start = add(offset, k0, mul(mul(jp, nr), n_stride))
    rows = _view(meta.results[0], start, [nr, steps], [n_stride, 1], elem)
    panel = _view(bp, add(base, mul(jp, kc * nr)), [steps, nr], [nr, 1], elem)
    copy_by_blocks(rows, panel, block)


def _view(source, offset, sizes: list, strides: list, elem: ir.Type) -> ir.Value:
    """A static-shaped view of `source`'s memory with unit stride along its rows."""
    static_strides = [s if isinstance(s, int) else DYNAMIC_STRIDE for s in strides]
    view_type = ir.MemRefType.get(sizes, elem, layout=ir.StridedLayoutAttr.get(DYNAMIC_STRIDE, static_strides))
    dynamic_strides = [s for s in strides if not isinstance(s, int)]
    return memref.ReinterpretCastOp(view_type, source, [im.as_value(offset)], [], dynamic_strides,
                                    ir.DenseI64ArrayAttr.get([DYNAMIC_STRIDE]), ir.DenseI64ArrayAttr.get(sizes),
                                    ir.DenseI64ArrayAttr.get(static_strides)).result


# ----------------------------------------------------------------------------------------- A panels

def pack_a_k_major(a_op: Operand, a, ap, mr: int, k0, steps: int, kc: int, acc: ir.Type, whole=None) -> None:
    """Ap[(ip * KC + t) * MR + r] = A[ip * MR + r, k0 + t] for t < steps, zero past M. The MR rows are
    copied together, one column at a time: an interleaved store (RVV: a segment store). `whole`: only that
    many whole panels (a run-time count) are packed."""
    def panel(ip, rows: int) -> None:
        _k_major_panel(a_op, a, ap, mr, ip, rows, k0, steps, kc, acc)
    if whole is not None:
        loop(0, whole, 1, lambda ip, _: panel(ip, mr))
        return
    _each_panel(a_op.rows, mr, panel)


def _k_major_panel(a_op: Operand, a, ap, mr: int, ip, rows: int, k0, steps: int, kc: int, acc: ir.Type,
                   valid=None) -> None:
    """Panel ip of pack_a_k_major from its first `rows` rows (`valid` of them at run time, when given: the
    others are read from the last valid row, which is in bounds, and stored as zeros)."""
    length = min(a_op.run, steps) if a_op.packed else steps
    row_of = (lambda r: r) if valid is None else (
        lambda r: arith.MinUIOp(im.const(r), arith.SubIOp(valid, im.const(1)).result).result)
    kept = [None if valid is None else below(r, valid) for r in range(rows)]

    def piece(t0, _):
        runs = [run_of(a, a_op.at(add(mul(ip, mr), row_of(r)), add(k0, t0)), im.const(length)) for r in range(rows)]

        def copy(fast: bool):
            def column(t, _):
                base = add(mul(add(mul(ip, kc), t0, t), mr))
                for r in range(mr):
                    value = convert(runs[r].load(t, fast), acc) if r < rows else zero(acc)
                    if r < rows and kept[r] is not None:
                        value = arith.SelectOp(kept[r], value, zero(acc)).result
                    memref.StoreOp(value, ap, [add(base, r)])
            loop(0, length, 1, column)
        versioned(runs[:1], copy)
    loop(0, steps, length, piece)


def pack_a_rows(a_op: Operand, a, ap, mr: int, k0, steps: int, kc: int, acc: ir.Type, whole=None) -> None:
    """Ap[(ip * MR + r) * KC + t] = A[ip * MR + r, k0 + t] for t < steps, zero past M. `whole`: only that many
    whole panels (a run-time count) are packed."""
    m = a_op.rows
    run = min(a_op.run, steps) if a_op.packed else steps

    def row(i, _):
        def piece(t0, _):
            copy_run(a, a_op.at(i, add(k0, t0)), ap, add(mul(i, kc), t0), im.const(run), acc)
        loop(0, steps, run, piece)
    if whole is not None:
        loop(0, mul(whole, mr), 1, row)
        return
    loop(0, m, 1, row)
    padded_rows = -(-m // mr) * mr
    if padded_rows > m:
        loop(m, padded_rows, 1, lambda i, _: fill(ap, mul(i, kc), 1, im.const(steps), zero(acc)))


def pack_a_panel_rows(a_op: Operand, a, ap, mr: int, ip, valid, k0, steps: int, kc: int, acc: ir.Type,
                      rows_layout: bool) -> None:
    """Panel ip packed from its first `valid` rows (below MR; an int, or a run-time count), zeros in the
    others, whose rows of A are not read: in pack_a_rows's layout when rows_layout, else in
    pack_a_k_major's."""
    if not rows_layout:
        if isinstance(valid, int):
            _k_major_panel(a_op, a, ap, mr, ip, valid, k0, steps, kc, acc)
        else:
            _k_major_panel(a_op, a, ap, mr, ip, min(mr, a_op.rows), k0, steps, kc, acc, valid)
        return
    for r in range(mr):
        start = add(mul(add(mul(ip, mr), r), kc))

        def copy():
            copy_run(a, a_op.at(add(mul(ip, mr), r), k0), ap, start, im.const(steps), acc)

        def zeros():
            fill(ap, start, 1, im.const(steps), zero(acc))
        if isinstance(valid, int):
            (copy if r < valid else zeros)()
            continue
        branches(below(r, valid), lambda kept: copy() if kept else zeros())


def _each_panel(m: int, mr: int, panel: Callable) -> None:
    """panel(ip, rows) for the full panels (in a loop) and the partial last one."""
    full = m // mr
    if full:
        loop(0, full, 1, lambda ip, _: panel(ip, mr))
    if m % mr:
        panel(im.const(full), m % mr)


# ----------------------------------------------------------------------------------------- C panels

def write_back(c_out_op: Operand, c_out, c_in_op: Optional[Operand], c_in, cp, padded_n: ir.Value, acc: ir.Type,
               in_place: bool = False, rows=None) -> None:
    """C_out[row, col] = Cp[row * padded_n + col] (+ C_in[row, col], or + C_out[row, col] in place) for every
    row < M and col < N, in C_out's own memory order: micro tile by micro tile when it is packed, each tile
    row one run (a whole row when it is a matrix). `rows`: a run-time bound on the rows written instead of
    M, for a C_out that is a matrix."""
    out_type = ir.Type.parse(c_out_op.element)
    p0, p1 = (c_out_op.shape[2], c_out_op.shape[3]) if c_out_op.packed else (1, c_out_op.cols)
    tiles = (c_out_op.shape[0], c_out_op.shape[1]) if c_out_op.packed else (c_out_op.rows if rows is None else rows, 1)
    chunk = im.const(p1)
    for operand in (c_in_op,):
        if operand is not None and operand.packed:
            chunk = im.const(min(p1, operand.run))

    def tile_row(i1, j1, ii):
        row, col0 = add(mul(i1, p0), ii), mul(j1, p1)

        def piece(c0, _):
            col = add(col0, c0)
            out = run_of(c_out, c_out_op.at(row, col), chunk)
            old = out if in_place else run_of(c_in, c_in_op.at(row, col), chunk) if c_in_op else None
            source = add(mul(row, padded_n), col)

            def copy(fast: bool):
                def one(t, _):
                    value = memref.LoadOp(cp, [add(source, t)]).result
                    if old is not None:
                        value = plus(value, convert(old.load(t, fast), acc))
                    out.store(convert(value, out_type), t, fast)
                loop(0, chunk, 1, one)
            versioned([out, old], copy)
        loop(0, p1, chunk, piece)

    def tile(i1, _):
        def column(j1, _):
            loop(0, p0, 1, lambda ii, _: tile_row(i1, j1, ii))
        loop(0, tiles[1], 1, column)
    loop(0, tiles[0], 1, tile)
