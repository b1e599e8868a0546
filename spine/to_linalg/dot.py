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
"""
from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, linalg

from .converter import handles
from .types import element_type


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


@handles("tt.dot")
def convert_dot(conv, op):
    a, bb, acc = (conv.concrete(v) for v in op.operands)
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
    conv.bind(op.results[0], result)


