"""The largest tile a kernel computes: what a program keeps close, reported to GPU-style host code as the
kernel's shared memory (spine/device_shape.py)."""
from __future__ import annotations

import math

from mlir import ir

from .types import element_bytes


def largest_tile_bytes(tt_func) -> int:
    """The bytes of the largest statically shaped tensor any operation of `tt_func` yields (0: none).

        %x = tt.load %p : tensor<128x64x!tt.ptr<f16>>   (yields tensor<128x64xf16>: 16,384 bytes)"""
    largest = 0

    def visit(op):
        nonlocal largest
        for result in op.operation.results:
            ty = result.type
            if isinstance(ty, ir.RankedTensorType) and ty.has_static_shape and _is_number(ty.element_type):
                largest = max(largest, math.prod(ty.shape) * element_bytes(ty.element_type))
        return ir.WalkResult.ADVANCE
    tt_func.operation.walk(visit)
    return largest


def _is_number(ty) -> bool:
    return isinstance(ty, (ir.IntegerType, ir.FloatType))
