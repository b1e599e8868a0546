"""Spine: an open Triton backend for RISC-V CPUs.

    import triton
    from spine.driver import CPUDriver
    triton.runtime.driver.set_active(CPUDriver())
"""
__version__ = "0.1.0"
