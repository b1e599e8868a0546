"""Sums of byte products on x86's dot-product instruction (`vpdpbusd`: AVX512-VNNI, or AVX-VNNI's 256 bits).

A quantized dot product sums int8 products row by row, as llama.cpp's do before each block's scale:
`tl.sum(q.to(tl.int32) * x.to(tl.int32), axis=1)` with q unsigned and x signed bytes. LLVM forms
`vpdpbusd` only from a whole reduction to one number, so rows of 16 or 32 bytes come out as widenings,
multiplies and a horizontal sum per row. One `vpdpbusd` adds, in each of 16 lanes, the products of 4
unsigned bytes of one operand and 4 signed bytes of the other: 64 products an instruction. This pass finds
such reductions (a linalg.generic whose last iterator is a reduction, of an extent E that is a multiple of
4, over i8 inputs into an i32 output, whose body is `out + ext(u1) * ext(s1) + ext(u2) * ext(s2) ...`, each
u zero- and each s sign-extended from i8, the bytes computed element by element from the inputs by byte
ops) and computes them with the instruction, the bytes loaded straight from the inputs, row by row:

    linalg.generic {iterators = [parallel, reduction]}                      16 rows of E = 16 bytes
        ins(%q, %xl, %xh : memref<16x16xi8, strided<[20, 1]>>, ..., memref<16x16xi8, strided<[32, 1]>>)
        outs(%acc : memref<16xi32>) {
      ^bb0(%w: i8, %a: i8, %b: i8, %o: i32):
        %lo = arith.andi %w, %c15 : i8
        %hi = arith.shrui %w, %c4 : i8
        yield %o + (extui %lo) * (extsi %a) + (extui %hi) * (extsi %b)
    }
  becomes
    scf.for %c = 0 to 1 {                                      a chunk of 16 rows: one vector of 16 sums
      4 times (4 rows a vector):  %w4 = 4 rows of %q joined (vector<64xi8>), likewise %a4, %b4
                                  %p = vpdpbusd(vpdpbusd(0, %w4 & 15, %a4), %w4 >> 4, %b4)
                                       (each row's 16 bytes give 4 lanes of partial sums)
      %sums = pairwise lane sums of the 4 partial vectors, twice (vector.shuffle + add): 16 row sums in order
      %acc[16 c ..] += %sums
    }

Rows too few for a whole chunk (a row of 18 blocks ends with 2) load only themselves, zeros standing for
the rest, and add their sums as a shorter vector. Where an input's inner strides are known only at run time
(the branch of a masked tile yields the argument or a padded copy of it), the loop runs behind a check that
they are 1 (and 4), the generic as it was otherwise. With E = 4 each lane is one output, and rows of
consecutive groups fill the vectors ([B, G, 4] summed over the 4: `tl.sum(tl.reshape(p, [B, G, 4]),
axis=2)`). The instruction's sums wrap in 32 bits as the generic's do; the 16-bit products it forms first
are exact (255 x -128 and 255 x 127 fit). Signed times signed and unsigned times unsigned bytes are not its
products; the pass gives up on them, as on a body doing anything else or on rows longer than a vector, and
says so (its outcome in the kernel's pass list): the generic then stays as it was, for the loops and LLVM.
Only on x86 CPUs with one of the two extensions (LoweringChoices.byte_dot_lanes, targets.byte_dot_lanes).

Written here, not left to LLVM: its x86 backend matches `vpdpbusd` only in a reduction to one value
(combineVPDPBUSDPattern); the instruction is LLVM's intrinsic, called from the vector loop, since MLIR's
x86vector dialect has no Python bindings in the build Spine uses (as to_linalg/vnni_matmul.py says)."""
from __future__ import annotations

from dataclasses import dataclass

from ..ir_walk import collect_ops

GROUP = 4            # bytes a lane of vpdpbusd sums
DYNAMIC = -(2 ** 63)  # a dynamic stride, as MLIR's Python bindings give it (ShapedType.get_dynamic_stride_or_offset)
INTRINSICS = {16: "llvm.x86.avx512.vpdpbusd.512", 8: "llvm.x86.avx512.vpdpbusd.256"}
# element-by-element ops on bytes that may compute the products' operands
BYTE_OPS = ("arith.andi", "arith.ori", "arith.xori", "arith.shrui", "arith.shrsi", "arith.shli", "arith.addi",
            "arith.subi", "arith.muli", "arith.maxui", "arith.minui", "arith.maxsi", "arith.minsi", "arith.constant")


@dataclass(frozen=True)
class ByteDot:
    """A reduction this pass computes."""
    generic: object
    products: tuple       # (unsigned byte, signed byte) pairs of the body, i8 values
    prelude: tuple        # the body's byte ops, in order
    extent: int           # E, the reduced extent


@dataclass(frozen=True)
class Rows:
    """How a ByteDot's bytes fill vectors of 4 * lanes bytes: `rows` rows (over `row_shape`, the inputs'
    leading dimensions) of `row_bytes` contiguous bytes; `partials` lanes a row when E > 4 (summed after)."""
    row_bytes: int
    rows: int
    row_shape: tuple
    partials: int
    merged_groups: bool   # E = 4 with the groups' dimension folded into the rows

    def chunk_rows(self, lanes: int) -> int:
        """Rows whose sums make one vector of `lanes` outputs (a row of E > 4 bytes gives one output, a row of
        groups one per group): the loop's step. 0 when a row is longer than a vector (several a row)."""
        return lanes if self.partials > 1 else GROUP * lanes // self.row_bytes


def byte_dots_on_vnni(module, lanes: int):
    """Rewrites every qualifying reduction; returns None, or "gave up on ..." for candidates it left."""
    candidates = collect_ops(module, _is_candidate)
    refused = []
    for generic in candidates:
        found = _match(generic)
        rows = _rows(found, lanes) if isinstance(found, ByteDot) else found
        if isinstance(rows, str):
            refused.append(rows)
            continue
        _rewrite(found, rows, lanes)
    if refused:
        return f"gave up on {len(refused)} of {len(candidates)} byte-product sums (first: {refused[0]})"
    return None


def _is_candidate(op) -> bool:
    """A linalg.generic on buffers, last iterator a reduction of a multiple of 4, i8 inputs, an i32 output."""
    from mlir import ir
    if op.name != "linalg.generic" or len(op.results):
        return False
    iterators = [str(a) for a in ir.ArrayAttr(op.attributes["iterator_types"])]
    if not iterators or "reduction" not in iterators[-1] or any("reduction" in i for i in iterators[:-1]):
        return False
    types = [v.type for v in op.operands]
    if len(types) < 2 or not all(isinstance(t, ir.MemRefType) for t in types):
        return False
    memrefs = [ir.MemRefType(t) for t in types]
    return (all(str(m.element_type) == "i8" for m in memrefs[:-1]) and str(memrefs[-1].element_type) == "i32"
            and memrefs[0].has_static_shape and memrefs[0].shape[-1] % GROUP == 0)


def _producer(value):
    """The op defining `value`, None for a block argument."""
    from mlir import ir
    return value.owner if isinstance(value, ir.OpResult) else None


def _match(generic):
    """The ByteDot of a candidate, or why it is not one."""
    from mlir import ir
    maps = [str(ir.AffineMapAttr(m).value) for m in ir.ArrayAttr(generic.attributes["indexing_maps"])]
    rank = len(ir.ArrayAttr(generic.attributes["iterator_types"]))
    dims = [f"d{i}" for i in range(rank)]
    if any(m != f"({', '.join(dims)}) -> ({', '.join(dims)})" for m in maps[:-1]):
        return "an input not indexed by every loop"
    if maps[-1] != f"({', '.join(dims)}) -> ({', '.join(dims[:-1])})":
        return "an output indexed otherwise than by the parallel loops"
    inputs = len(generic.operands) - 1
    block = generic.regions[0].blocks[0]
    ops = list(block.operations)
    accumulator = block.arguments[inputs]
    total = _producer(ops[-1].operands[0]) if len(ops[-1].operands) == 1 else None
    if total is None or total.name != "arith.addi" or accumulator not in list(total.operands):
        return "a body that is not the output plus products"
    used = [total.operation, ops[-1].operation]
    terms = [v for v in total.operands if v != accumulator]
    products = []
    while terms:
        op = _producer(terms.pop())
        if op is not None and op.name == "arith.addi":
            used.append(op.operation)
            terms += list(op.operands)
            continue
        if op is None or op.name != "arith.muli":
            return "a sum of something other than products"
        extended = [_producer(v) for v in op.operands]
        if any(e is None or e.name not in ("arith.extui", "arith.extsi") or str(e.operands[0].type) != "i8"
               for e in extended):
            return "a product of values other than extended bytes"
        if sorted(e.name for e in extended) != ["arith.extsi", "arith.extui"]:
            return "a product of two signed or two unsigned bytes"
        used += [op.operation] + [e.operation for e in extended]
        products.append(tuple(next(e for e in extended if e.name == kind).operands[0]
                              for kind in ("arith.extui", "arith.extsi")))
    prelude = []
    for op in ops:
        if op.operation in used:
            continue
        if op.name not in BYTE_OPS or any(str(r.type) != "i8" for r in op.results):
            return f"a body with {op.name} on {op.results[0].type if len(op.results) else 'nothing'}"
        prelude.append(op)
    extent = ir.MemRefType(generic.operands[0].type).shape[-1]
    return ByteDot(generic, tuple(products), tuple(prelude), extent)


def _strides(value) -> list:
    from mlir import ir
    return list(ir.MemRefType(value.type).get_strides_and_offset()[0])


def _row_major(shape) -> list:
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return list(reversed(strides))


def _rows(dot: ByteDot, lanes: int):
    """The Rows of `dot` when its bytes fill whole vectors of 4 * lanes bytes, else why not."""
    from mlir import ir
    inputs = list(dot.generic.operands)[:-1]
    output = ir.MemRefType(dot.generic.operands[-1].type)
    if not output.has_static_shape or output.get_strides_and_offset()[0] != _row_major(output.shape):
        return "an output that is not one contiguous buffer"
    if any(_strides(v)[-1] not in (1, DYNAMIC) for v in inputs):
        return "bytes of a row that are not contiguous"
    shape = list(ir.MemRefType(inputs[0].type).shape)
    vector_bytes = GROUP * lanes
    count = 1
    for n in shape[:-1]:
        count *= n
    if dot.extent > GROUP:
        if vector_bytes % dot.extent:
            return f"rows of {dot.extent} bytes, more than a vector of {vector_bytes} or not a part of one"
        return Rows(dot.extent, count, tuple(shape[:-1]), dot.extent // GROUP, False)
    merged = len(shape) > 1 and all(_strides(v)[-2] in (GROUP, DYNAMIC) for v in inputs)
    row_bytes = shape[-2] * GROUP if merged else GROUP
    rows = count // shape[-2] if merged else count
    row_shape = tuple(shape[:-2] if merged else shape[:-1])
    fits = vector_bytes % row_bytes == 0 if row_bytes <= vector_bytes else row_bytes % vector_bytes == 0
    if not fits:
        return f"rows of {row_bytes} bytes, neither a part of a vector of {vector_bytes} nor whole vectors"
    return Rows(row_bytes, rows, row_shape, 1, merged)


def _rewrite(dot: ByteDot, rows: Rows, lanes: int) -> None:
    """The vector loop in place of the generic; where an input's inner strides are known only at run time
    (a masked tile, copied or read in place), the loop runs when they are those it needs and the generic,
    as it was, otherwise."""
    from mlir import ir
    from mlir.dialects import arith, memref, scf
    generic = dot.generic
    inputs = list(generic.operands)[:-1]
    with ir.InsertionPoint(generic), generic.location:
        # each input whose inner strides are known only at run time: its strided metadata, read once
        unknown = {v: memref.ExtractStridedMetadataOp(v) for v in inputs
                   if any(s == DYNAMIC for s in _strides(v)[-_inner_dims(rows):])}
        if not unknown:
            _vector_loop(dot, rows, lanes, inputs)
            generic.erase()
            return
        checks = [check for v, meta in unknown.items() for check in _stride_checks(v, meta, rows)]
        condition = checks[0]
        for check in checks[1:]:
            condition = arith.AndIOp(condition, check).result
        branch = scf.IfOp(condition, [], has_else=True)
        with ir.InsertionPoint(branch.then_block):
            _vector_loop(dot, rows, lanes, [_with_known_strides(v, unknown[v], rows) if v in unknown else v
                                            for v in inputs])
            scf.YieldOp([])
        with ir.InsertionPoint(branch.else_block):
            generic.operation.clone()
            scf.YieldOp([])
    generic.erase()


def _inner_dims(rows: Rows) -> int:
    """How many trailing dimensions must have their row-major strides (1, and 4 where groups merge)."""
    return 2 if rows.merged_groups else 1


def _stride_checks(value, meta, rows: Rows) -> list:
    """i1 values that hold when the input's dynamic inner strides (from its metadata `meta`) are 1 (and 4)."""
    from mlir.dialects import arith
    from ..to_linalg import index_math as im
    strides = _strides(value)
    return [arith.CmpIOp(arith.CmpIPredicate.eq, meta.strides[len(strides) - d], im.const(GROUP ** (d - 1))).result
            for d in range(1, _inner_dims(rows) + 1) if strides[-d] == DYNAMIC]


def _with_known_strides(value, meta, rows: Rows):
    """The input as a view whose inner strides are static (checked before it is used): a reinterpret_cast of
    its own base, offset and outer strides (`meta`, its strided metadata). Not a memref.cast: the lowering to
    loops folds a cast into the vector loads that use it, which then see the dynamic strides again."""
    from mlir import ir
    from ..to_linalg.builders import strided_view
    t = ir.MemRefType(value.type)
    known, offset = t.get_strides_and_offset()
    strides = [s if s != DYNAMIC else meta.strides[d] for d, s in enumerate(known)]
    for d in range(1, _inner_dims(rows) + 1):
        strides[-d] = GROUP ** (d - 1)
    return strided_view(meta.base_buffer, t.element_type, list(t.shape),
                        offset if offset != DYNAMIC else meta.offset, strides)


def _vector_loop(dot: ByteDot, rows: Rows, lanes: int, inputs: list) -> None:
    """The loop over chunks of rows, before the current insertion point, on `inputs` (static inner strides),
    and after it the last rows, too few for a chunk: rows past them are zeros, not loaded, and only their
    sums are added to the output."""
    from mlir import ir
    from mlir.dialects import scf
    from ..to_linalg import index_math as im
    views = [_as_rows(v) if rows.merged_groups else v for v in inputs]
    out = _flat(dot.generic.operands[len(inputs)])
    step = rows.chunk_rows(lanes)
    whole = rows.rows // step if step else rows.rows * rows.row_bytes // (GROUP * lanes)
    if whole:
        loop = scf.ForOp(im.const(0), im.const(whole), im.const(1))
        with ir.InsertionPoint(loop.body):
            _chunk(dot, rows, lanes, views, out, loop.induction_variable, None)
            scf.YieldOp([])
    if step and rows.rows % step:
        _chunk(dot, rows, lanes, views, out, im.const(whole), rows.rows % step)


def _chunk(dot: ByteDot, rows: Rows, lanes: int, views: list, out, c, valid) -> None:
    """Chunk c's sums added to the output: all its rows (valid None), or only the first `valid`."""
    from mlir import ir
    from mlir.dialects import arith, vector
    from ..to_linalg import index_math as im
    from ..to_linalg import vnni_panels as vp
    block_inputs = list(dot.generic.regions[0].blocks[0].arguments)[:len(views)]
    word = ir.VectorType.get([lanes], ir.IntegerType.get_signless(32))
    operand = ir.VectorType.get([GROUP * lanes], ir.IntegerType.get_signless(8))
    per_vector = rows.chunk_rows(lanes) // rows.partials
    partials = []
    for part in range(rows.partials):
        v = arith.AddIOp(arith.MulIOp(c, im.const(rows.partials)).result, im.const(part)).result
        present = None if valid is None else max(0, min(per_vector, valid - part * per_vector))
        if present == 0:
            partials.append(vp.zero_vector(word))
            continue
        loaded = {a: _gather(view, v, rows, operand, present) for a, view in zip(block_inputs, views)}
        partials.append(_dot_products(dot, loaded, word, operand, lanes))
    at = arith.MulIOp(c, im.const(lanes)).result
    if valid is None:
        vector.StoreOp(arith.AddIOp(vector.LoadOp(word, out, [at]).result, _lane_sums(partials)).result, out, [at])
        return
    # the sums of the rows there are, as a shorter vector: a masked store would stall the loads that read
    # them next (no store forwarding from masked stores on Zen 4; the Q4_1 rows of 18 blocks 7 % slower)
    count = valid * lanes // rows.chunk_rows(lanes)
    short = ir.VectorType.get([count], word.element_type)
    total = _lane_sums(partials)
    sums = vector.ShuffleOp(total, total, list(range(count))).result
    vector.StoreOp(arith.AddIOp(vector.LoadOp(short, out, [at]).result, sums).result, out, [at])


def _dot_products(dot: ByteDot, values: dict, word, operand, lanes: int):
    """The sum over the body's products of one vector of bytes: vpdpbusd per product, from zero."""
    from mlir.dialects import llvm
    from ..to_linalg import vnni_panels as vp
    values = dict(values)
    for op in dot.prelude:
        values[op.results[0]] = _vector_op(op, values, operand)
    sums = vp.zero_vector(word)
    for unsigned, signed in dot.products:
        sums = llvm.call_intrinsic(word, INTRINSICS[lanes], [sums, _vector_of(values, unsigned, operand),
                                                             _vector_of(values, signed, operand)], [], [])
    return sums


def _lane_sums(partials: list):
    """Vectors of rows with k partial lanes each (k = len(partials), a power of two) as one vector of the rows'
    sums, in order: adjacent lanes added pairwise across two vectors, log2(k) times."""
    from mlir import ir
    from mlir.dialects import arith, vector
    while len(partials) > 1:
        n = ir.VectorType(partials[0].type).shape[0]
        evens, odds = list(range(0, 2 * n, 2)), list(range(1, 2 * n, 2))
        partials = [arith.AddIOp(vector.ShuffleOp(a, b, evens).result, vector.ShuffleOp(a, b, odds).result).result
                    for a, b in zip(partials[0::2], partials[1::2])]
    return partials[0]


def _as_rows(value):
    """An input [r..., G, 4] as [r..., G * 4]: its groups' rows, contiguous (the last two strides 4, 1)."""
    from mlir import ir
    from mlir.dialects import memref
    t = ir.MemRefType(value.type)
    rank = len(t.shape)
    strides, offset = t.get_strides_and_offset()
    layout = ir.StridedLayoutAttr.get(offset, list(strides[:-2]) + [1])
    shape = list(t.shape[:-2]) + [t.shape[-2] * t.shape[-1]]
    reassociation = [[d] for d in range(rank - 2)] + [[rank - 2, rank - 1]]
    return memref.CollapseShapeOp(ir.MemRefType.get(shape, t.element_type, layout, t.memory_space), value,
                                  reassociation).result


def _flat(value):
    """A contiguous buffer as one dimension."""
    from mlir import ir
    from mlir.dialects import memref
    t = ir.MemRefType(value.type)
    if len(t.shape) == 1:
        return value
    size = 1
    for n in t.shape:
        size *= n
    return memref.CollapseShapeOp(ir.MemRefType.get([size], t.element_type), value, [list(range(len(t.shape)))]).result


def _gather(view, v, rows: Rows, vtype, present=None):
    """Vector v (an index) of an input's bytes in row order: several rows loaded and joined, or a part of one;
    only the first `present` rows loaded where it is given, zeros in place of the rest."""
    from mlir import ir
    from mlir.dialects import arith, vector
    from ..to_linalg import index_math as im
    from ..to_linalg import vnni_panels as vp
    vector_bytes = ir.VectorType(vtype).shape[0]
    if rows.row_bytes >= vector_bytes:
        per_row = rows.row_bytes // vector_bytes
        row = arith.DivUIOp(v, im.const(per_row)).result
        col = arith.MulIOp(arith.RemUIOp(v, im.const(per_row)).result, im.const(vector_bytes)).result
        return vector.LoadOp(vtype, view, _row_indices(row, rows.row_shape) + [col]).result
    per_vector = vector_bytes // rows.row_bytes
    first = arith.MulIOp(v, im.const(per_vector)).result
    row_type = ir.VectorType.get([rows.row_bytes], ir.VectorType(vtype).element_type)
    parts = [vector.LoadOp(row_type, view, _row_indices(arith.AddIOp(first, im.const(j)).result, rows.row_shape)
                           + [im.const(0)]).result if present is None or j < present else vp.zero_vector(row_type)
             for j in range(per_vector)]
    while len(parts) > 1:
        parts = [_joined(parts[i], parts[i + 1]) for i in range(0, len(parts), 2)]
    return parts[0]


def _row_indices(row, row_shape) -> list:
    """The indices of linear row `row` over the row dimensions (row-major)."""
    from mlir.dialects import arith
    from ..to_linalg import index_math as im
    indices = []
    for extent in reversed(row_shape[1:]):
        indices.append(arith.RemUIOp(row, im.const(extent)).result)
        row = arith.DivUIOp(row, im.const(extent)).result
    return ([row] if row_shape else []) + list(reversed(indices))


def _joined(a, b):
    from mlir import ir
    from mlir.dialects import vector
    return vector.ShuffleOp(a, b, list(range(2 * ir.VectorType(a.type).shape[0]))).result


def _vector_op(op, values: dict, vtype):
    """The body's byte op on vectors: operands from `values`, or broadcast where they are scalars from outside
    the body; a constant becomes a splat."""
    from mlir import ir
    from mlir.dialects import arith
    if op.name == "arith.constant":
        return arith.ConstantOp(vtype, ir.DenseElementsAttr.get_splat(vtype, op.attributes["value"])).result
    operands = [_vector_of(values, x, vtype) for x in op.operands]
    attributes = {a.name: a.attr for a in op.attributes}
    return ir.Operation.create(op.name, results=[vtype], operands=operands, attributes=attributes).results[0]


def _vector_of(values: dict, value, vtype):
    from mlir.dialects import vector
    return values[value] if value in values else vector.BroadcastOp(vtype, value).result
