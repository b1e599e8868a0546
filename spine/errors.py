"""Exceptions Spine raises to users."""


class SpineCompilationError(RuntimeError):
    """A kernel uses something Spine cannot compile; the message names the op and the source line."""


class KernelFault(RuntimeError):
    """A kernel crashed while running (under QEMU, the guest server died); the next launch works again."""


class DeviceAssertionError(AssertionError):
    """A `tl.device_assert` failed in a kernel (compiled with debug=True); raised after the grid ran."""
