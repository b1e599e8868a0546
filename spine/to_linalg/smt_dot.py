"""smt.dot (reserved calls `dot` and `dot_acc`, smt_calls.py) → a call of a packed-matmul function
(smt_microkernel.py) on the operands' buffers:

    %c = tt.call @"spine.language.smt.reference.dot__..."(%a, %b) {smt.microkernel = "rvv"}
           : (tensor<4x2x8x8xf32>, tensor<2x2x8x16xf32>) -> tensor<4x2x8x16xf32>
  becomes
    %am  = bufferization.to_buffer %a read_only        (or the 2-D matrix %a was packed from)
    %bm  = bufferization.to_buffer %b read_only
    %out = memref.alloc() : memref<32x32xf32>          (C as a plain matrix)
    func.call @spine_smt_matmul_rvv_<digest>(%am, %bm, %out)
    %c   = pack(bufferization.to_tensor %out)          (so that an unpack of %c is %out itself)

An operand that is `pack(x)` (smt_views.py) is read from x, so the transposed copy is never made; the
product is written as a plain matrix and packed only if something needs the tiles. `dot_acc(a, b, acc)`
(smt.dot's `acc=`, or `acc += smt.dot(a, b)` fused by smt_rewrites.py) reads acc while writing the result:
into a plain matrix when acc was packed from one, else in acc's own packed layout (a loop-carried packed
accumulator stays packed).

When the call sits in a loop and B is defined outside it (the sub-blocks of an smt.parallel loop times one
block of B), B's panels are packed once before the loop and every call reads them.
"""
from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, bufferization, func, linalg, memref, scf, tensor

from ..microkernels import MICROKERNELS
from ..ir_names import CARRIED_TWIN, SHARED_PANEL_TWIN, STRIDED_TWIN
from ..ir_walk import named
from . import amx_matmul, ime_matmul, ime_rows, vnni_matmul
from . import smt_microkernel as mk
from .smt_panels import zero
from .smt_calls import lowers
from .smt_views import pack, packed_source
from .types import element_type, shape_of

SUM_TYPES = {"f16": "f32", "bf16": "f32", "f32": "f32", "f64": "f64", "i8": "i32"}   # as smt/matmul.py
DEFAULT_MICROKERNEL = "portable"


def operand(value: ir.Value) -> tuple[ir.Value, mk.Operand]:
    """The tensor to read a packed matmul's operand from (the matrix it was packed from, when smt.view
    packed it; else the tensor itself: tt.dot's plain matrices, dot.py) and its layout."""
    source = packed_source(value)
    value = source if source is not None else value
    return value, mk.Operand(shape_of(value.type), str(element_type(value.type)))


BUFFER_USE = "spine.buffer_use"    # numbers every to_buffer made here (conv.buffer_uses counts them)


def _buffer(conv, value: ir.Value, operand: mk.Operand, read_only: bool = True, contiguous: bool = False) -> ir.Value:
    """The tensor's buffer, for the call that follows (row-major when `contiguous`: bufferization copies the
    tensor into one if its buffer is not). Bufferization does not see the call: it takes this
    op for the tensor's last use. CSE would merge two equal to_buffer ops of one tensor (the same zero
    accumulator of two dots, say), and the second call would then read a buffer that an op between the
    two calls may have overwritten in place; a distinct number on each keeps them apart."""
    return _typed_buffer(conv, value, operand.memref_type(contiguous), read_only)


def _typed_buffer(conv, value: ir.Value, memref_type: ir.Type, read_only: bool = True) -> ir.Value:
    """_buffer with the buffer's type given."""
    use = conv.buffer_uses
    conv.buffer_uses += 1
    op = bufferization.ToBufferOp(memref_type, value, read_only=read_only)
    op.operation.attributes[BUFFER_USE] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), use)
    return op.result


def _microkernel(op):
    try:
        name = ir.StringAttr(op.attributes["smt.microkernel"]).value
    except KeyError:
        name = DEFAULT_MICROKERNEL
    return MICROKERNELS[name]


@lowers("dot", "dot_acc")
def convert_dot(conv, op):
    operands = [operand(conv.concrete(v)) for v in op.operands]
    c_in = operands[2] if len(operands) == 3 else None
    result_type = ir.RankedTensorType(op.results[0].type)
    conv.bind(op.results[0], packed_product(conv, op, operands[0], operands[1], c_in, result_type, _microkernel(op)))


def packed_product(conv, op, a, b, c_in, result_type: ir.RankedTensorType, kernel, padding_from=None,
                   unread_rows: bool = False) -> ir.Value:
    """a @ b (+ c_in) through the packed matmul with `kernel`. Operands are (tensor, layout) pairs as
    `operand` gives them; the result is a plain matrix for a 2-D result_type, else packed into its tiles.
    `op` is the TTIR op computing it (its loop decides whether B's panels are packed outside the loop).
    `padding_from`: an index value when A's rows from it on are zero padding (a masked tl.load's): an
    accumulator updated in place never reads them (PackedMatmul.row_bound). `unread_rows`: A's rows from
    there on are not zeros but whatever follows in memory, which only that accumulator may be given."""
    (a, a_op), (b, b_op) = a, b
    c_in, c_in_op = c_in if c_in is not None else (None, None)
    sum_type = SUM_TYPES[a_op.element]
    matrix = _matrix_unit(kernel, a_op, b_op, sum_type, c_in_op, str(result_type.element_type))
    if matrix is not None:
        return _matrix_product(conv, op, (a, a_op), (b, b_op), (c_in, c_in_op), result_type, matrix,
                               padding_from if unread_rows else None)
    panels = _b_panels(conv, op, b, mk.BPanels(b_op, sum_type, kernel, _block_steps(a_op, b_op, kernel)))
    b_arg = panels if panels is not None else _buffer(conv, b, b_op)
    kernel = kernel.for_rows(a_op.rows)
    bound = [padding_from] if padding_from is not None and not a_op.packed else []
    in_place = c_in is not None and _updates_in_place(op, c_in, c_in_op, result_type)
    if unread_rows and not (in_place and bound):
        a = _zero_rows_from(a, padding_from)
    if in_place:
        spec = mk.PackedMatmul(a_op, b_op, c_in_op, None, sum_type, kernel, in_place=True,
                               b_panels=panels is not None, row_bound=bool(bound))
        out = _buffer(conv, c_in, c_in_op, read_only=False, contiguous=spec.direct)
        _call(conv, spec, [_buffer(conv, a, a_op), b_arg, out] + bound)
        _share_b(conv, spec, mk.define, mk.shares_b(spec))
        return bufferization.ToTensorOp(result_type, out, restrict=True, writable=True).result
    shape = tuple(result_type.shape)
    out_shape = (shape[0] * shape[2], shape[1] * shape[3]) if len(shape) == 4 else shape
    spec = mk.PackedMatmul(a_op, b_op, mk.Operand(out_shape, str(result_type.element_type)), c_in_op, sum_type,
                           kernel, b_panels=panels is not None)
    out = memref.AllocOp(ir.MemRefType.get(list(out_shape), result_type.element_type), [], [],
                         alignment=mk.ALIGNMENT).result
    inputs = [_buffer(conv, a, a_op), b_arg] + ([_buffer(conv, c_in, c_in_op)] if c_in is not None else [])
    call = _call(conv, spec, inputs + [out])
    _share_b(conv, spec, mk.define, mk.shares_b(spec))
    twin = spec.strided_twin()
    if twin is not None:
        # stored whole, the product may be written straight into its destination: the lowering decides
        _declare(conv, twin)
        _share_b(conv, twin, mk.define, mk.shares_b(twin))
        call.attributes[STRIDED_TWIN] = ir.StringAttr.get(twin.name)
    product = bufferization.ToTensorOp(ir.RankedTensorType.get(list(out_shape), result_type.element_type), out,
                                       restrict=True, writable=True).result
    return pack(product, shape) if len(shape) == 4 else product


# the emitter of each matrix-unit kernel (spine/microkernels.py: matrix units and dot-product instructions)
MATRIX_UNITS = {"ime": ime_matmul, "a100": ime_matmul, "amx": amx_matmul, "vnni": vnni_matmul,
                "avxvnni": vnni_matmul}


def _matrix_unit(kernel, a_op: mk.Operand, b_op: mk.Operand, sum_type: str, c_in_op, out_element: str):
    """The matrix-unit kernel for this product, if the target's kernel names one for its types and its
    emitter computes the operands' layouts (C_out as _matrix_product allocates it, or C_in in place)."""
    if a_op.element != b_op.element:
        return None
    name = {("i8", "i32"): kernel.int8, ("bf16", "f32"): kernel.bf16,
            ("f16", "f32"): kernel.fp16}.get((a_op.element, sum_type), "")
    if not name:
        return None
    unit = MICROKERNELS[name]
    probe = mk.PackedMatmul(a_op, b_op, mk.Operand((a_op.rows, b_op.cols), out_element), c_in_op, sum_type, unit)
    return unit if MATRIX_UNITS[name].supports(probe) else None


def _matrix_product(conv, op, a, b, c_in, result_type, kernel, zero_from) -> ir.Value:
    """packed_product on a matrix unit (MATRIX_UNITS: ime_matmul.py, amx_matmul.py): B packed by every call,
    A's padding rows zeroed (`zero_from`) rather than skipped, every operand a row-major buffer (or packed
    tiles, where the emitter takes them)."""
    (a, a_op), (b, b_op), (c_in, c_in_op) = a, b, c_in
    unit, sum_type = MATRIX_UNITS[kernel.name], SUM_TYPES[a_op.element]
    conv.matrix_units.add(kernel.name)   # where the kernel may run can depend on it (spacemit_cores.py)
    define = unit.define

    def factor(x, x_op):
        """A or B as the emitter reads it: row-major, or with any strides (unit.VIEWS) where it is not packed."""
        return _buffer(conv, x, x_op, contiguous=not (unit.VIEWS and not x_op.packed))
    if zero_from is not None:
        a = _zero_rows_from(a, zero_from)
    in_place = c_in is not None and _updates_in_place(op, c_in, c_in_op, result_type)
    if in_place:
        spec = mk.PackedMatmul(a_op, b_op, c_in_op, None, sum_type, kernel, in_place=True)
        out = _buffer(conv, c_in, c_in_op, read_only=False, contiguous=True)
        call = _call(conv, spec, [factor(a, a_op), factor(b, b_op), out], define)
        _share_b(conv, spec, define, _unit_shares_b(unit, spec))
        twin = spec.strided_twin()
        if twin is not None and unit.supports(twin):
            # a loop's accumulator may be kept in its destination: the lowering decides
            _declare(conv, twin, define)
            _share_b(conv, twin, define, _unit_shares_b(unit, twin))
            call.attributes[CARRIED_TWIN] = ir.StringAttr.get(twin.name)
        return bufferization.ToTensorOp(result_type, out, restrict=True, writable=True).result
    shape = tuple(result_type.shape)
    out_shape = (shape[0] * shape[2], shape[1] * shape[3]) if len(shape) == 4 else shape
    spec = mk.PackedMatmul(a_op, b_op, mk.Operand(out_shape, str(result_type.element_type)), c_in_op, sum_type,
                           kernel)
    out = memref.AllocOp(ir.MemRefType.get(list(out_shape), result_type.element_type), [], [],
                         alignment=mk.ALIGNMENT).result
    inputs = [factor(a, a_op), factor(b, b_op)] + ([_buffer(conv, c_in, c_in_op, contiguous=True)]
                                                   if c_in is not None else [])
    _call(conv, spec, inputs + [out], define)
    _share_b(conv, spec, define, _unit_shares_b(unit, spec))
    product = bufferization.ToTensorOp(ir.RankedTensorType.get(list(out_shape), result_type.element_type), out,
                                       restrict=True, writable=True).result
    return pack(product, shape) if len(shape) == 4 else product


def _share_b(conv, spec: mk.PackedMatmul, define, can: bool) -> None:
    """Where the emitter `can` keep B's panel for the launch, its twin that may (spec.shared_twin) is declared
    and named on spec's function: the lowering decides which calls take it (compiler/shared_panels.py)."""
    if not can:
        return
    twin = spec.shared_twin()
    _declare(conv, twin, define)
    named(conv.module.body, spec.name).attributes[SHARED_PANEL_TWIN] = ir.StringAttr.get(twin.name)


def _unit_shares_b(unit, spec: mk.PackedMatmul) -> bool:
    return getattr(unit, "SHARES_B", False) and unit.supports(spec.shared_twin())


def takes_rows(conv, a: ir.Value, b: ir.Value, acc: ir.Value) -> bool:
    """Whether a dot of these operands is the few rows' product of the target's matrix unit (row_product)."""
    unit = conv.microkernel.int8 if conv.microkernel is not None else ""
    return ime_rows.takes(unit, shape_of(a.type), shape_of(b.type), str(element_type(a.type)),
                          str(element_type(b.type)), str(element_type(acc.type)))


def row_product(conv, op, a: ir.Value, b: ir.Value, acc: ir.Value, zero_acc: bool, unread_from=None):
    """a @ b (+ acc) for tt.dot `op` as the few rows' product of the target's matrix unit (ime_rows.py), when it
    takes the operands; else None. B is read as B^T: the tensor tl.trans was applied to (or the bytes its
    nibbles come from), else a transposed copy. `zero_acc`: the dot adds nothing (tl.dot(a, b)).
    `unread_from`: A's rows from there on were read in place past a masked load's window and are not the
    zeros the load gives them; they are zeroed first (every row of C is computed here)."""
    if not takes_rows(conv, a, b, acc):
        return None
    conv.matrix_units.add(conv.microkernel.int8)   # where the kernel may run depends on it (spacemit_cores.py)
    (m, k), n = shape_of(a.type), shape_of(b.type)[1]
    bt, nibble = ime_rows.transposed_source(b)
    if bt is None:
        empty = tensor.EmptyOp([n, k], element_type(b.type)).result
        bt = linalg.transpose(b, outs=[empty], permutation=[1, 0])
    result_type = ir.RankedTensorType(acc.type)
    c_op = mk.Operand((m, n), "i32")
    c_type = c_op.memref_type(contiguous=True)
    if not zero_acc and _updates_in_place(op, acc, c_op, result_type):
        out = _typed_buffer(conv, acc, c_type, read_only=False)
    else:
        out = memref.AllocOp(c_type, [], [], alignment=mk.ALIGNMENT).result
        if not zero_acc:
            memref.CopyOp(_typed_buffer(conv, acc, c_type), out)
    spec = ime_rows.RowProduct(m, k, n, nibble, accumulate=not zero_acc)
    a_type = ime_rows.operand_type(m, k)
    if unread_from is None:
        a_buffer = _typed_buffer(conv, a, a_type)
    else:   # a plain buffer (of the tile or its zero-padded copy), seen through the argument's layout
        plain = mk.Operand((m, k), "i8").memref_type(contiguous=True)
        a_buffer = memref.CastOp(a_type, _typed_buffer(conv, _zero_rows_from(a, unread_from), plain)).result
    _call(conv, spec, [a_buffer,
                       _typed_buffer(conv, bt, ime_rows.operand_type(n, k)), out], ime_rows.define)
    return bufferization.ToTensorOp(result_type, out, restrict=True, writable=True).result


def reads_a_below_bound(op) -> bool:
    """Whether a packed tt.dot (TTIR) will read its A only below a zero-padded tile's row bound: it adds
    its product into a loop-carried accumulator, so _updates_in_place holds and the bound is passed on.
    (packed_product zero-fills the rows itself should the two ever disagree.)"""
    acc = op.operands[2]
    return (op.name == "tt.dot" and acc.type == op.results[0].type and len(list(acc.uses)) == 1
            and isinstance(acc.owner, ir.Block))


def _zero_rows_from(a: ir.Value, rows: ir.Value) -> ir.Value:
    """The matrix `a` when all its rows are the matrix's (`rows` is at least their number: nearly every
    tile), else a copy whose rows from `rows` on are zero (those of `a` are never read)."""
    a_type = ir.RankedTensorType(a.type)
    whole = arith.CmpIOp(arith.CmpIPredicate.uge, rows,
                         arith.ConstantOp(ir.IndexType.get(), a_type.shape[0]).result).result
    branch = scf.IfOp(whole, [a.type], has_else=True)
    with ir.InsertionPoint(branch.then_block):
        scf.YieldOp([a])
    with ir.InsertionPoint(branch.else_block):
        scf.YieldOp([_zero_padded(a, rows)])
    return branch.results[0]


def _zero_padded(a: ir.Value, rows: ir.Value) -> ir.Value:
    """A copy of the matrix `a` whose rows from `rows` on are zero."""
    a_type = ir.RankedTensorType(a.type)
    dynamic, cols = ir.ShapedType.get_dynamic_size(), a_type.shape[1]
    offsets, sizes, strides = (ir.DenseI64ArrayAttr.get(v) for v in ([0, 0], [dynamic, cols], [1, 1]))
    part_type = ir.RankedTensorType.get([dynamic, cols], a_type.element_type)
    part = tensor.ExtractSliceOp(part_type, a, [], [rows], [], offsets, sizes, strides).result
    empty = tensor.EmptyOp(list(a_type.shape), a_type.element_type).result
    zeros = linalg.fill(zero(a_type.element_type), outs=[empty])
    return tensor.InsertSliceOp(part, zeros, [], [rows], [], offsets, sizes, strides).result


def _updates_in_place(op, c_in: ir.Value, c_in_op: mk.Operand, result_type) -> bool:
    """Whether the product can be added into the accumulator's own buffer: the accumulator has the result's
    type, nothing else reads it, and it is packed tiles (smt's loop-carried accumulator) or a loop's own
    argument (tt.dot's `acc` in a loop over k)."""
    if c_in.type != result_type or len(list(op.operands[2].uses)) != 1:
        return False
    return c_in_op.packed or isinstance(c_in.owner, ir.Block)


def _call(conv, spec, args: list, define=mk.define):
    _declare(conv, spec, define)
    return func.CallOp([], ir.FlatSymbolRefAttr.get(spec.name), args)


def _declare(conv, spec, define=mk.define) -> None:
    if spec.name not in conv.declared:
        define(conv.module.body, spec)
        conv.declared[spec.name] = None


def _block_steps(a_op: mk.Operand, b_op: mk.Operand, kernel) -> int:
    return mk.PackedMatmul(a_op, b_op, a_op, None, "f32", kernel).kc


# ------------------------------------------------------------------------------ B packed outside a loop

def _b_panels(conv, op, b: ir.Value, spec: mk.BPanels):
    """B's panels packed once before the loop around the call, when B is the same in every iteration (an
    smt.parallel loop's sub-blocks multiplied by one block of B): else None, and each call packs B."""
    loop_op = enclosing_loop(op)
    if loop_op is None or inside(op.operands[1], loop_op):
        return None
    converted_loop = ir.InsertionPoint.current.block.owner
    if getattr(converted_loop, "name", None) != "scf.for":
        return None
    memo = conv.b_panels
    key = (b, spec.name)
    if key not in memo:
        with ir.InsertionPoint(converted_loop):
            panels = memref.AllocOp(mk.panels_type(spec.accumulator), [spec.size()], [],
                                    alignment=mk.ALIGNMENT).result
            _call(conv, spec, [_buffer(conv, b, spec.b), panels], mk.define_b_panels)
        memo[key] = panels
    return memo[key]


def enclosing_loop(op):
    """The TTIR scf.for whose body holds the call directly, or None."""
    parent = op.operation.parent
    return parent if parent is not None and parent.name == "scf.for" else None


def inside(value: ir.Value, region_op) -> bool:
    """Whether a TTIR value is defined within region_op (a block argument of it, or by an op nested in it)."""
    owner = value.owner
    op = owner.owner if isinstance(owner, ir.Block) else getattr(owner, "operation", owner)
    while op is not None:
        if op == region_op:
            return True
        op = op.parent
    return False
