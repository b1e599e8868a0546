"""tt.dot → a linalg.generic computing acc + a @ b, with the loops ordered (m, k, n).

    %d = tt.dot %a, %b, %c : tensor<MxK>, tensor<KxN> -> tensor<MxN>
  becomes
    %d = linalg.generic {maps (m,k,n) -> (m,k), (k,n), (m,n); iterators [parallel, reduction, parallel]}
           ins(%a, %b) outs(%c) { %p = mul(ext(a), ext(b)); yield add(acc, %p) }

The innermost loop runs along n, where b and the accumulator are contiguous rows, so LLVM vectorises it
without reassociating the k sum (linalg.matmul would put k innermost). Inputs narrower than the
accumulator (fp16/bf16 → fp32, int8 → int32) are widened first. "tf32" precision is computed as IEEE
fp32: a CPU has no tf32. An fp16/bf16 accumulator (out_dtype=tl.float16) is summed in fp32 and rounded
once at the end, as the interpreter and the GPUs' tensor cores do; rounding every step loses bits along k.
Batched (3-D) dots get a leading batch loop.

Where the target has a packed-matmul micro-kernel (the module's `spine.microkernel` attribute, recorded
by the pipeline from the target, spine/microkernels.py) and the product is large enough to pay for
packing, a 2-D dot goes through the packed matmul that smt.dot uses (smt_dot.packed_product) instead:
operands packed into panels, a register-blocked vector inner loop. Both sum along k in order; the
packed matmul may add an accumulator it does not update in place after the products rather than before
(last-bit differences only). An int8 dot of at most 4 rows on K1's matrix unit (a token's product) takes
the unit's own few-rows product instead (smt_dot.row_product, ime_rows.py), whatever its size.
"""
from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, linalg

from .builders import is_positive_zero
from . import smt_dot
from .converter import handles
from .types import element_type, shape_of

# Smallest M, N and K the packed matmul takes; smaller dots stay generic loops. 8: triton-cpu's fp32 tiles
# (8 x 32 x 8 in a loop over K) ran 2.4x faster through it than as loops (B read in place)
MIN_PACKED = 8


def _widen(value: ir.Value, to: ir.Type) -> ir.Value:
    if value.type == to:
        return value
    if _is_float(to):
        if isinstance(value.type, ir.IntegerType):
            return arith.SIToFPOp(to, value).result
        return arith.ExtFOp(to, value).result
    return arith.ExtSIOp(to, value).result


def _is_float(ty: ir.Type) -> bool:
    return not isinstance(ty, (ir.IntegerType, ir.IndexType))


def _packed_kernel(conv, a: ir.Value, b: ir.Value, acc: ir.Value):
    """The micro-kernel to compute this dot with, or None for the generic loops."""
    if conv.microkernel is None:
        return None
    a_shape, b_shape = shape_of(a.type), shape_of(b.type)
    if len(a_shape) != 2 or min(a_shape[0], a_shape[1], b_shape[1]) < MIN_PACKED:
        return None
    inputs, sums = str(element_type(a.type)), str(element_type(acc.type))
    if str(element_type(b.type)) != inputs or smt_dot.SUM_TYPES.get(inputs) != sums:
        return None
    return conv.microkernel


def is_packed(conv, op) -> bool:
    """Whether the TTIR tt.dot `op` goes through the packed matmul or the matrix unit's few rows' product
    (its operand types are those of the converted values)."""
    return op.name == "tt.dot" and (_packed_kernel(conv, *op.operands) is not None
                                    or smt_dot.takes_rows(conv, *op.operands))


def _zero_accumulator(op) -> bool:
    """Whether the dot adds its product to a constant +0.0 (`tl.dot(a, b)`): the packed matmul's sums start
    from +0.0 anyway, so there is no accumulator to read and add."""
    return is_positive_zero(op.operands[2])


@handles("tt.dot")
def convert_dot(conv, op):
    a, bb, acc = (conv.concrete(v) for v in op.operands)
    conv.bind(op.results[0], product(conv, op, a, bb, acc))


def product(conv, op, a: ir.Value, bb: ir.Value, acc: ir.Value, packed: bool = True) -> ir.Value:
    """acc + a @ bb for the TTIR op `op` (tt.dot, or tt.dot_scaled once its operands are decoded), through
    the matrix unit's few-rows product or the packed matmul where it pays and `packed` allows it."""
    # tt.dot_scaled's A is decoded and scaled first: its loaded tile's rows are not these rows. A's rows past
    # a masked load's window may be read in place (unread_rows), holding what follows in memory.
    padding_from = conv.zero_padded_rows.get(op.operands[0]) if op.name == "tt.dot" else None
    unread_rows = op.name == "tt.dot" and op.operands[0] in conv.rows_read_in_place
    if packed and op.name == "tt.dot":
        rows = smt_dot.row_product(conv, op, a, bb, acc, _zero_accumulator(op),
                                   padding_from if unread_rows else None)
        if rows is not None:
            return rows
    kernel = _packed_kernel(conv, a, bb, acc) if packed else None
    if kernel is not None:
        c_in = None if _zero_accumulator(op) else smt_dot.operand(acc)
        return smt_dot.packed_product(conv, op, smt_dot.operand(a), smt_dot.operand(bb), c_in,
                                      ir.RankedTensorType(acc.type), kernel, padding_from=padding_from,
                                      unread_rows=unread_rows)
    rank = len(ir.RankedTensorType(a.type).shape)
    out_type = acc.type
    if element_type(acc.type) in (ir.F16Type.get(), ir.BF16Type.get()):
        acc = arith.ExtFOp(ir.RankedTensorType.get(ir.RankedTensorType(acc.type).shape, ir.F32Type.get()), acc).result
    acc_type = element_type(acc.type)
    d = [ir.AffineDimExpr.get(i) for i in range(rank + 1)]
    if rank == 2:
        m, k, n = d
        batch = []
    else:
        bt, m, k, n = d
        batch = [bt]
    dims = rank + 1
    maps = [ir.AffineMapAttr.get(ir.AffineMap.get(dims, 0, batch + exprs))
            for exprs in ([m, k], [k, n], [m, n])]
    iterators = ir.ArrayAttr.get([ir.Attribute.parse(f"#linalg.iterator_type<{t}>") for t in
                                  ["parallel"] * len(batch) + ["parallel", "reduction", "parallel"]])
    generic = linalg.GenericOp([acc.type], [a, bb], [acc], ir.ArrayAttr.get(maps), iterators)
    block = generic.regions[0].blocks.append(element_type(a.type), element_type(bb.type), acc_type)
    with ir.InsertionPoint(block):
        x, y, s = block.arguments
        x, y = _widen(x, acc_type), _widen(y, acc_type)
        if _is_float(acc_type):
            result = arith.AddFOp(s, arith.MulFOp(x, y).result).result
        else:
            result = arith.AddIOp(s, arith.MulIOp(x, y).result).result
        linalg.YieldOp([result])
    result = generic.results[0]
    if result.type != out_type:
        result = arith.TruncFOp(out_type, result).result
    return result


