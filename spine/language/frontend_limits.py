"""Limits of triton's frontend that Spine keeps, with the way around them in the error.

spine-triton's own triton lets `tl.arange(0, M)` have any length. Spine runs the stock triton wheel, whose
frontend checks that every tensor dimension is a power of 2 in `tl.arange` and again in every block type
it builds (triton._utils.validate_block_shape). Lifting that would mean replacing the check for every
backend in the process, where GPU backends rely on it, so Spine keeps the limit and says, in the error
of the kernel being compiled for Spine, how such code is written instead. install() runs before each
Spine compile; other backends' errors are left as triton words them.
"""
from __future__ import annotations

ARANGE_WORKAROUND = ("Spine runs the stock triton frontend, in which every tensor dimension is a power of 2 "
                     "(spine-triton's patched triton allows other lengths). Write tl.arange(0, BLOCK) with "
                     "BLOCK = triton.next_power_of_2(n), and mask the lanes >= n in loads and stores")


def _explained(arange):
    def arange_for_spine(self, start, end, *, ret_ty=None):
        try:
            return arange(self, start, end, ret_ty=ret_ty)
        except ValueError as err:
            from ..options import CPUOptions
            if "power of 2" not in str(err) or not isinstance(getattr(self.builder, "options", None), CPUOptions):
                raise
            raise ValueError(f"{err} (got {end - start}): {ARANGE_WORKAROUND}") from None
    arange_for_spine.__wrapped__ = arange
    return arange_for_spine


def install() -> None:
    """Gives triton's `arange` the explained error (idempotent)."""
    from triton.language.semantic import TritonSemantic
    if not hasattr(TritonSemantic.arange, "__wrapped__"):
        TritonSemantic.arange = _explained(TritonSemantic.arange)
