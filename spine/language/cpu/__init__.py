"""CPU math for kernels (`from triton.language.extra.cpu import libdevice`)."""
from . import libdevice

__all__ = ["libdevice"]
