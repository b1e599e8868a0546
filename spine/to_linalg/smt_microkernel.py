"""The packed matmul's code, emitted as one function per operand layout: C (+)= A @ B over memrefs, built
from MLIR's vector dialect so that one emitter serves every target (compiler/microkernels.py gives the
vector width and register block; scalable vectors for RVV, fixed ones for x86).

Why MLIR rather than C with intrinsics: the kernel then goes through the same lowering and LLVM codegen as
the rest of the kernel (one compile, no second compiler, inlined into the kernel), and the vector dialect
already says everything the inner loop needs; LLVM turns it into `vl4re32.v` + `vfmacc.vf` on RVV and
`vbroadcastss` + `vfmadd231ps` on AVX-512 without further help.

The scheme is GotoBLAS's, at the size of one smt.dot:

    pack B  into column panels of NR = NV * VL columns:  Bp[panel][k][0:NR]   (zero past N)
    pack A  into row panels of MR rows:                  Ap[panel][k][0:MR]   (zero past M)
    for each B panel, for each A panel:
        acc[MR][NV] = 0                                   MR x NV vector registers
        for k:  b[v] = Bp[j][k][v*VL:(v+1)*VL]            NV vector loads (one whole-register load on RVV)
                a[r] = Ap[i][k][r]                        MR scalar loads
                acc[r][v] += a[r] * b[v]                  MR * NV vector FMAs
        write acc back through a small stack buffer into C (adding C_in when accumulating)

Packing widens the inputs to the accumulator type (fp16/bf16 -> fp32, int8 -> int32), so the inner loop
is the same for every input type. A and B are read in the layout the caller has: a 2-D matrix (any
strides) or packed micro tiles [R1, C1, p0, p1]; so is C.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Callable, Optional

from mlir import ir
from mlir.dialects import arith, func, memref, scf, vector

from ..compiler.microkernels import MicroKernel
from . import index_math as im

DYNAMIC = ir.ShapedType.get_dynamic_size()
DYNAMIC_STRIDE = ir.ShapedType.get_dynamic_stride_or_offset()
ALIGNMENT = 64


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

    def memref_type(self) -> ir.Type:
        rank = len(self.shape)
        layout = ir.StridedLayoutAttr.get(DYNAMIC_STRIDE, [DYNAMIC_STRIDE] * rank)
        return ir.MemRefType.get(list(self.shape), ir.Type.parse(self.element), layout=layout)

    def at(self, row, col) -> list:
        """The memref indices of element (row, col); col + t for t < run - col % run stays contiguous."""
        if not self.packed:
            return [im.as_value(row), im.as_value(col)]
        p0, p1 = self.shape[2], self.shape[3]
        return [im.as_value(x) for x in (_div(row, p0), _div(col, p1), _rem(row, p0), _rem(col, p1))]


@dataclass(frozen=True)
class PackedMatmul:
    a: Operand
    b: Operand
    c_out: Operand
    c_in: Optional[Operand]       # the accumulator added to the product, if any
    accumulator: str              # the type products are summed in
    kernel: MicroKernel

    @property
    def name(self) -> str:
        digest = hashlib.sha256(repr(self).encode()).hexdigest()[:16]
        return f"spine_smt_matmul_{self.kernel.name}_{digest}"


# ---------------------------------------------------------------------------------------- index helpers

def _div(x, d: int):
    if isinstance(x, int):
        return x // d
    return x if d == 1 else arith.DivUIOp(x, im.const(d)).result


def _rem(x, d: int):
    if isinstance(x, int):
        return x % d
    return im.const(0) if d == 1 else arith.RemUIOp(x, im.const(d)).result


def _ceil_div(x, d):
    if isinstance(x, int) and isinstance(d, int):
        return -(-x // d)
    return arith.CeilDivUIOp(im.as_value(x), im.as_value(d)).result


def _loop(lb, ub, step, body: Callable, inits=()) -> list:
    """scf.for; body(iv, carried) returns the values to carry on."""
    op = scf.ForOp(im.as_value(lb), im.as_value(ub), im.as_value(step), list(inits))
    with ir.InsertionPoint(op.body):
        scf.YieldOp(list(body(op.induction_variable, list(op.inner_iter_args)) or []))
    return list(op.results)


def _convert(value: ir.Value, to: ir.Type) -> ir.Value:
    """A scalar or vector converted to another element type (widened, narrowed, or int <-> float)."""
    source = value.type.element_type if isinstance(value.type, ir.VectorType) else value.type
    target = to.element_type if isinstance(to, ir.VectorType) else to
    if source == target:
        return value
    src_int, dst_int = isinstance(source, ir.IntegerType), isinstance(target, ir.IntegerType)
    if src_int and dst_int:
        op = arith.ExtSIOp if source.width < target.width else arith.TruncIOp
    elif src_int:
        op = arith.SIToFPOp
    elif dst_int:
        op = arith.FPToSIOp
    else:
        op = arith.ExtFOp if _float_width(source) < _float_width(target) else arith.TruncFOp
    return op(to, value).result


def _float_width(ty: ir.Type) -> int:
    return {"f16": 16, "bf16": 16, "f32": 32, "f64": 64}[str(ty)]


def _zero(ty: ir.Type) -> ir.Value:
    if isinstance(ty, ir.IntegerType):
        return arith.ConstantOp(ty, 0).result
    return arith.ConstantOp(ty, 0.0).result


def _add(x: ir.Value, y: ir.Value) -> ir.Value:
    elem = x.type.element_type if isinstance(x.type, ir.VectorType) else x.type
    return (arith.AddIOp if isinstance(elem, ir.IntegerType) else arith.AddFOp)(x, y).result


# ------------------------------------------------------------------------------------------- the code

@dataclass(frozen=True)
class _Shape:
    """What the emitters share: the accumulator type, vector type and the register block's extent."""
    spec: PackedMatmul
    acc: ir.Type
    vtype: ir.Type
    vl: ir.Value                 # elements per vector register (run time when scalable)
    nr: ir.Value                 # columns of a B panel: NV * vl
    panels_n: ir.Value           # ceil(N / nr)

    @property
    def mr(self) -> int:
        return self.spec.kernel.rows

    @property
    def nv(self) -> int:
        return self.spec.kernel.vectors


def vector_type(kernel: MicroKernel, acc: ir.Type, vectors: int = 1) -> ir.Type:
    width = acc.width if isinstance(acc, ir.IntegerType) else _float_width(acc)
    lanes = max(1, kernel.lanes * 32 // width) * vectors
    return ir.VectorType.get([lanes], acc, scalable=[kernel.scalable])


def _vector_length(kernel: MicroKernel, vtype: ir.Type) -> ir.Value:
    lanes = im.const(ir.VectorType(vtype).shape[0])
    if not kernel.scalable:
        return lanes
    return arith.MulIOp(vector.VectorScaleOp().result, lanes).result


def define(module_body: ir.Block, spec: PackedMatmul) -> None:
    """Adds `func.func private @<spec.name>(a, b, [c_in,] c_out)` to the module."""
    operands = [spec.a, spec.b] + ([spec.c_in] if spec.c_in else []) + [spec.c_out]
    with ir.InsertionPoint.at_block_begin(module_body), ir.Location.unknown():
        fn = func.FuncOp(spec.name, ir.FunctionType.get([o.memref_type() for o in operands], []),
                         visibility="private")
        entry = fn.add_entry_block()
        with ir.InsertionPoint(entry):
            args = list(entry.arguments)
            c_in = args[2] if spec.c_in else None
            _body(spec, args[0], args[1], c_in, args[-1], entry)
            func.ReturnOp([])


def _body(spec: PackedMatmul, a, b, c_in, c_out, entry: ir.Block) -> None:
    acc = ir.Type.parse(spec.accumulator)
    vtype = vector_type(spec.kernel, acc)
    vl = _vector_length(spec.kernel, vtype)
    nr = arith.MulIOp(vl, im.const(spec.kernel.vectors)).result
    shape = _Shape(spec, acc, vtype, vl, nr, _ceil_div(spec.b.cols, nr))
    k = spec.a.cols
    bp = _alloc(im.as_value(im.mul(arith.MulIOp(shape.panels_n, nr).result, k)), acc)
    ap = _alloc(im.const(_ceil_div(spec.a.rows, shape.mr) * shape.mr * k), acc)
    block = memref.AllocaOp(ir.MemRefType.get([DYNAMIC], acc), [arith.MulIOp(nr, im.const(shape.mr)).result], [],
                            alignment=ALIGNMENT).result
    _pack_b(shape, b, bp)
    _pack_a(shape, a, ap)
    _loop(0, shape.panels_n, 1, lambda jp, _: _column_panel(shape, jp, ap, bp, block, c_in, c_out))


def _alloc(size: ir.Value, elem: ir.Type) -> ir.Value:
    return memref.AllocOp(ir.MemRefType.get([DYNAMIC], elem), [size], [], alignment=ALIGNMENT).result


# ------------------------------------------------------------------------------------------- packing

def _pack_b(shape: _Shape, b, bp) -> None:
    """Bp[(panel * K + k) * NR + c] = B[k, panel * NR + c], zero past N; copied in contiguous runs."""
    spec = shape.spec
    n, k = spec.b.cols, spec.b.rows
    run = _column_chunk(spec.b, shape.nr)
    padded = arith.MulIOp(shape.panels_n, shape.nr).result

    def row(kk, _):
        def chunk(col0, _):
            panel = arith.DivUIOp(col0, shape.nr).result
            within = arith.RemUIOp(col0, shape.nr).result
            dst = arith.AddIOp(arith.MulIOp(arith.AddIOp(arith.MulIOp(panel, im.const(k)).result, kk).result,
                                            shape.nr).result, within).result
            valid = arith.MinSIOp(arith.MaxSIOp(arith.SubIOp(im.const(n), col0).result, im.const(0)).result,
                                  run).result
            src = spec.b.at(kk, col0)
            _copy_run(b, src, bp, dst, 1, valid, shape.acc)
            _fill(bp, dst, 1, valid, run, shape.acc)
        _loop(0, padded, run, chunk)
    _loop(0, k, 1, row)


def _pack_a(shape: _Shape, a, ap) -> None:
    """Ap[(panel * K + k) * MR + r] = A[panel * MR + r, k], zero past M."""
    spec = shape.spec
    m, k, mr = spec.a.rows, spec.a.cols, shape.mr

    def panel_rows(panel, rows: int) -> None:
        for r in range(mr):
            dst = im.as_value(im.add(im.mul(panel, k * mr), r))
            if r < rows:
                row = im.add(im.mul(panel, mr), r)

                def chunk(kk0, _):
                    start = arith.AddIOp(dst, arith.MulIOp(kk0, im.const(mr)).result).result
                    _copy_run(a, spec.a.at(row, kk0), ap, start, mr, im.const(spec.a.run), shape.acc)
                _loop(0, k, spec.a.run, chunk)
            else:
                _fill(ap, dst, mr, im.const(0), im.const(k), shape.acc)

    full = m // mr
    if full:
        _loop(0, full, 1, lambda panel, _: panel_rows(panel, mr))
    if m % mr:
        panel_rows(full, m % mr)


def _copy_run(src, src_at: list, dst, dst_start, dst_step: int, count, acc: ir.Type) -> None:
    """dst[dst_start + t * dst_step] = src[src_at with its last index + t] for t < count, widened to acc."""
    def one(t, _):
        index = src_at[:-1] + [arith.AddIOp(src_at[-1], t).result]
        value = _convert(memref.LoadOp(src, index).result, acc)
        memref.StoreOp(value, dst, [arith.AddIOp(dst_start, arith.MulIOp(t, im.const(dst_step)).result).result])
    _loop(0, count, 1, one)


def _fill(dst, start, step: int, lo, hi, acc: ir.Type) -> None:
    """dst[start + t * step] = 0 for lo <= t < hi."""
    zero = _zero(acc)

    def one(t, _):
        memref.StoreOp(zero, dst, [arith.AddIOp(start, arith.MulIOp(t, im.const(step)).result).result])
    _loop(lo, hi, 1, one)


def _column_chunk(operand: Operand, nr: ir.Value) -> ir.Value:
    """Columns copied at a time between an operand and a panel: contiguous in both, and never crossing a
    panel's edge (micro-tile widths and panel widths are powers of two, so the smaller divides the other)."""
    if not operand.packed:
        return nr
    return arith.MinUIOp(im.const(operand.run), nr).result


# ---------------------------------------------------------------------------------------- the kernel

def _column_panel(shape: _Shape, jp, ap, bp, block, c_in, c_out) -> None:
    spec = shape.spec
    m, mr = spec.a.rows, shape.mr
    full = m // mr
    if full:
        _loop(0, full, 1, lambda ip, _: _block(shape, ip, jp, mr, ap, bp, block, c_in, c_out))
    if m % mr:
        _block(shape, im.const(full), jp, m % mr, ap, bp, block, c_in, c_out)


def _block(shape: _Shape, ip, jp, rows: int, ap, bp, block, c_in, c_out) -> None:
    """One MR x NR block of C: the register-blocked reduction, then the write-back of its valid `rows`."""
    k = shape.spec.a.cols
    a_base = arith.MulIOp(ip, im.const(k * shape.mr)).result
    b_base = arith.MulIOp(arith.MulIOp(jp, im.const(k)).result, shape.nr).result
    zero = vector.BroadcastOp(shape.vtype, _zero(shape.acc)).result
    accs = [zero] * (shape.mr * shape.nv)
    unroll = shape.spec.kernel.unroll
    main = k - k % unroll

    def steps(count: int):
        def body(kk, carried):
            for u in range(count):
                carried = _step(shape, arith.AddIOp(kk, im.const(u)).result, a_base, b_base, ap, bp, carried)
            return carried
        return body
    if main:
        accs = _loop(0, main, unroll, steps(unroll), accs)
    if k % unroll:
        accs = _loop(main, k, 1, steps(1), accs)
    for r in range(shape.mr):
        for v in range(shape.nv):
            at = arith.AddIOp(arith.MulIOp(im.const(r), shape.nr).result,
                              arith.MulIOp(im.const(v), shape.vl).result).result
            vector.StoreOp(accs[r * shape.nv + v], block, [at])
    _write_back(shape, ip, jp, rows, block, c_in, c_out)


def _step(shape: _Shape, kk, a_base, b_base, ap, bp, accs: list) -> list:
    """One reduction step: NV vectors of B, MR scalars of A, MR * NV multiply-adds."""
    kernel = shape.spec.kernel
    b_at = arith.AddIOp(b_base, arith.MulIOp(kk, shape.nr).result).result
    bvecs = _load_b(shape, bp, b_at)
    a_at = arith.AddIOp(a_base, arith.MulIOp(kk, im.const(shape.mr)).result).result
    out = list(accs)
    for r in range(shape.mr):
        scalar = memref.LoadOp(ap, [arith.AddIOp(a_at, im.const(r)).result]).result
        splat = vector.BroadcastOp(shape.vtype, scalar).result
        for v in range(shape.nv):
            i = r * shape.nv + v
            out[i] = _multiply_add(kernel, splat, bvecs[v], out[i])
    return out


def _load_b(shape: _Shape, bp, at) -> list:
    """The NV vectors of B for one step. Scalable: one load of the whole group, split into registers (a
    single whole-register-group load on RVV instead of NV loads with NV address computations)."""
    kernel = shape.spec.kernel
    if kernel.scalable and shape.nv > 1:
        group = vector.LoadOp(vector_type(kernel, shape.acc, shape.nv), bp, [at]).result
        lanes = ir.VectorType(shape.vtype).shape[0]
        return [vector.ScalableExtractOp(shape.vtype, group, v * lanes).result for v in range(shape.nv)]
    return [vector.LoadOp(shape.vtype, bp, [arith.AddIOp(at, arith.MulIOp(im.const(v), shape.vl).result).result]).result
            for v in range(shape.nv)]


def _multiply_add(kernel: MicroKernel, x, y, acc) -> ir.Value:
    elem = ir.VectorType(acc.type).element_type
    if isinstance(elem, ir.IntegerType):
        return arith.AddIOp(acc, arith.MulIOp(x, y).result).result
    if kernel.fma:
        return vector.FMAOp(x, y, acc).result
    return arith.AddFOp(acc, arith.MulFOp(x, y).result).result


def _write_back(shape: _Shape, ip, jp, rows: int, block, c_in, c_out) -> None:
    """C[row, col] = block[r, c] (+ C_in[row, col]) for the block's rows < `rows` and columns < N."""
    spec = shape.spec
    n = spec.c_out.cols
    out_type = ir.Type.parse(spec.c_out.element)
    run = _column_chunk(spec.c_out, shape.nr)
    col_start = arith.MulIOp(jp, shape.nr).result
    col_end = arith.MinUIOp(arith.AddIOp(col_start, shape.nr).result, im.const(n)).result
    for r in range(rows):
        row = arith.AddIOp(arith.MulIOp(ip, im.const(shape.mr)).result, im.const(r)).result

        def chunk(col0, _):
            valid = arith.MinUIOp(arith.SubIOp(col_end, col0).result, run).result
            out_at = spec.c_out.at(row, col0)
            in_at = spec.c_in.at(row, col0) if spec.c_in else None
            first = arith.AddIOp(arith.MulIOp(im.const(r), shape.nr).result,
                                 arith.SubIOp(col0, col_start).result).result

            def one(t, _):
                value = memref.LoadOp(block, [arith.AddIOp(first, t).result]).result
                if c_in is not None:
                    old = memref.LoadOp(c_in, in_at[:-1] + [arith.AddIOp(in_at[-1], t).result]).result
                    value = _add(value, _convert(old, shape.acc))
                memref.StoreOp(_convert(value, out_type), c_out, out_at[:-1] + [arith.AddIOp(out_at[-1], t).result])
            _loop(0, valid, 1, one)
        _loop(col_start, col_end, run, chunk)
