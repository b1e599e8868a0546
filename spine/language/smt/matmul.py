"""`smt.dot`: the product of packed tiles, lowered to a packed matmul with a register-blocked micro-kernel.

    a [M1, K1, m, k] x b [K1, N1, k, n] -> [M1, N1, m, n]

(b may also come packed as [N1, K1, n, k], as spine-triton accepts; it is transposed back first.)
Products are summed in fp32 for fp16, bf16 and fp32 inputs, in fp64 for fp64, in int32 for int8. The
result has the inputs' type for floats (as in spine-triton: `acc += smt.dot(a, b)` keeps an fp16
accumulator fp16 across a loop) and int32 for int8; `out_dtype=` asks for another (tl.float32 keeps the
fp32 sums). With `acc=` (or written `acc += smt.dot(a, b)`, which the conversion fuses) the sums are added
to acc in the wider type and rounded once, into acc's type.

The micro-kernel the call will use is chosen here, where the target is known (spine/microkernels.py),
and recorded on the call for the conversion.
"""
from __future__ import annotations

from triton.language import core as tl

from . import reference
from .checks import check, dims

_SUM_TYPES = {"fp16": tl.float32, "bf16": tl.float32, "fp32": tl.float32, "fp64": tl.float64, "int8": tl.int32}


def packed_dot(a, b, acc, out_dtype, _semantic, _generator) -> tl.tensor:
    check(isinstance(a, tl.tensor) and isinstance(b, tl.tensor) and len(dims(a)) == 4 and len(dims(b)) == 4,
          "smt.dot expects packed 4-D tiles a [M1, K1, m, k] and b [K1, N1, k, n] (smt.view with packed_size)")
    b = _as_k_by_n(a, b, _semantic)
    check(a.dtype == b.dtype, f"smt.dot operands differ in type: {a.dtype} and {b.dtype}")
    check(a.dtype.name in _SUM_TYPES, f"smt.dot supports fp16, bf16, fp32, fp64 and int8 tiles, got {a.dtype}")
    sum_type = _SUM_TYPES[a.dtype.name]
    result_shape = (dims(a)[0], dims(b)[1], dims(a)[2], dims(b)[3])
    if acc is not None:
        check(isinstance(acc, tl.tensor) and dims(acc) == result_shape,
              f"smt.dot accumulator must have shape {list(result_shape)}, got {list(dims(acc))}")
        out = _generator.call_JitFunction(reference.dot_acc, [a, b, acc, tl.constexpr(sum_type)], {})
    else:
        out_type = tl._unwrap_if_constexpr(out_dtype) or (tl.int32 if a.dtype == tl.int8 else a.dtype)
        out = _generator.call_JitFunction(reference.dot, [a, b, tl.constexpr(sum_type), tl.constexpr(out_type)], {})
    out.handle.set_attr("smt.microkernel", _semantic.builder.get_string_attr(_microkernel(_semantic)))
    return out


def _as_k_by_n(a, b, _semantic) -> tl.tensor:
    _, k1, _, k = dims(a)
    b_dims = dims(b)
    if b_dims[0] == k1 and b_dims[2] == k:
        return b
    check(b_dims[1] == k1 and b_dims[3] == k,
          f"smt.dot shapes do not match: a {list(dims(a))} [M1, K1, m, k] and b {list(b_dims)} "
          f"[K1, N1, k, n] (or [N1, K1, n, k])")
    return _semantic.permute(b, (1, 0, 3, 2))


def _microkernel(_semantic) -> str:
    from ...microkernels import choose
    options = _semantic.builder.options
    return choose(getattr(options, "triple", ""), getattr(options, "cpu", ""), getattr(options, "features", ""),
                  getattr(options, "matrix_unit", True)).name
