"""Casts from and to fp8e4b15, which triton leaves to the backend (codegen_fns["convert_custom_types"]).

The frontend keeps fp8e4b15 values as i8 (MLIR has no such type), so these casts cannot be tt.fp_to_fp:
they are tt.extern_elementwise calls of reserved symbols, expanded by the conversion with the same decoder
and encoder as the other fp8 formats (to_linalg/extern.py, to_linalg/fp8.py). Other casts first go
through float32 (exact for every fp8 and 16-bit float; float64 sources are rounded once, by the encoder)."""
from triton.language import core

# The symbols to_linalg/fp8.py expands (E4B15_DECODE, E4B15_ENCODE there).
FROM_FP8E4B15 = "__spine_fp8e4b15_to_fp32"
TO_FP8E4B15 = "__spine_to_fp8e4b15_"          # + "rtne" or "rtz"


def convert_custom_types(x, dst_ty, fp_downcast_rounding, _semantic=None):
    dst = dst_ty.scalar
    if x.dtype.is_fp8e4b15():
        wide = core.extern_elementwise("", "", [x], {(core.float8e4b15, ): (FROM_FP8E4B15, core.float32)},
                                       is_pure=True, _semantic=_semantic)
        return _semantic.cast(wide, dst) if dst != core.float32 else wide
    if x.dtype.is_fp8():
        x = _semantic.cast(x, core.float32)
    rounding = "rtz" if str(fp_downcast_rounding).upper().endswith("RTZ") else "rtne"
    symbol = TO_FP8E4B15 + rounding
    return core.extern_elementwise("", "", [x], {(t, ): (symbol, core.float8e4b15)
                                                for t in (core.float16, core.bfloat16, core.float32, core.float64)},
                                   is_pure=True, _semantic=_semantic)
