"""The package triton loads through the `triton.backends` entry point.

triton imports `<this package>.compiler` and `.driver` while it is itself half-initialised, so nothing here
may import triton.language, torch or the MLIR bindings at module level.
"""
from ..aliases import install as _install_aliases

_install_aliases()
