"""Spine's two changes to triton's frontend, each in force only while a kernel is compiled for Spine
(install() runs before each Spine compile; other backends' kernels see triton's frontend as it is).

Padding with infinities. spine-triton's triton adds `padding_option="neg_inf"` and `"inf"` to block-pointer
loads (FlagGems' softmax and max kernels pad with -inf). Stock triton's IR has only zero and NaN padding,
so such a load is built as a zero-padded one marked `spine.padding = "neg_inf"` (or "inf"), and the
conversion (to_linalg/load.py) pads with that value instead:

    tl.load(block_ptr, boundary_check=(0,), padding_option="neg_inf")
      → %x = tt.load %p {boundaryCheck = array<i32: 0>, padding = 1 : i32, spine.padding = "neg_inf"}

Power-of-2 lengths. spine-triton's triton lets `tl.arange(0, M)` have any length. Spine runs the stock
triton wheel, whose frontend checks that every tensor dimension is a power of 2 in `tl.arange` and again in
every block type it builds (triton._utils.validate_block_shape). Lifting that would mean replacing the
check for every backend in the process, where GPU backends rely on it; and relaxed for Spine's compiles
alone, triton's own IR verifier still refuses a reduction over such a tile (tt.reduce: "Number of elements
must be power-of-two"). So Spine keeps the limit and says, in the error, how such code is written instead.
"""
from __future__ import annotations

from ..ir_names import PADDING_ATTRIBUTE

ARANGE_WORKAROUND = ("Spine runs the stock triton frontend, in which every tensor dimension is a power of 2 "
                     "(spine-triton's patched triton allows other lengths). Write tl.arange(0, BLOCK) with "
                     "BLOCK = triton.next_power_of_2(n), and mask the lanes >= n in loads and stores")
INFINITE_PADDINGS = ("neg_inf", "inf")


def _for_spine(semantic) -> bool:
    from ..options import CPUOptions
    return isinstance(getattr(semantic.builder, "options", None), CPUOptions)


def _explained(arange):
    def arange_for_spine(self, start, end, *, ret_ty=None):
        try:
            return arange(self, start, end, ret_ty=ret_ty)
        except ValueError as err:
            if "power of 2" not in str(err) or not _for_spine(self):
                raise
            raise ValueError(f"{err} (got {end - start}): {ARANGE_WORKAROUND}") from None
    arange_for_spine.__wrapped__ = arange
    return arange_for_spine


def _infinite_padding(load):
    def load_for_spine(self, ptr, mask, other, boundary_check, padding_option, cache_modifier, eviction_policy,
                       is_volatile):
        if padding_option not in INFINITE_PADDINGS or not _for_spine(self):
            return load(self, ptr, mask, other, boundary_check, padding_option, cache_modifier, eviction_policy,
                        is_volatile)
        if not (ptr.type.is_ptr() and ptr.type.element_ty.is_block()):
            raise ValueError(f"padding_option={padding_option!r} applies to loads through block pointers")
        if not ptr.type.element_ty.element_ty.is_floating():
            raise ValueError(f"padding_option={padding_option!r} is not supported for integer block pointers")
        result = load(self, ptr, mask, other, boundary_check, "zero", cache_modifier, eviction_policy, is_volatile)
        result.handle.set_attr(PADDING_ATTRIBUTE, self.builder.get_string_attr(padding_option))
        return result
    load_for_spine.__wrapped__ = load
    return load_for_spine


def install() -> None:
    """Wraps triton's `arange` and `load` (idempotent)."""
    from triton.language.semantic import TritonSemantic
    if not hasattr(TritonSemantic.arange, "__wrapped__"):
        TritonSemantic.arange = _explained(TritonSemantic.arange)
    if not hasattr(TritonSemantic.load, "__wrapped__"):
        TritonSemantic.load = _infinite_padding(TritonSemantic.load)
