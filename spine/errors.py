"""Exceptions Spine raises to users."""


class SpineCompilationError(RuntimeError):
    """A kernel uses something Spine cannot compile; the message names the op and the source line."""


class KernelFault(RuntimeError):
    """A kernel crashed while running (under QEMU, the guest server died); the next launch works again."""


class DeviceAssertionError(AssertionError):
    """A `tl.device_assert` failed in a kernel (compiled with debug=True); raised after the grid ran."""


class OutOfBoundsError(DeviceAssertionError):
    """With debug=True or TRITON_DEBUG=1: a load, store or atomic would have reached an element outside the
    tensor argument its pointer came from. The access was skipped; raised after the grid ran, naming the
    element offset, the argument and its extent in elements, the kernel and the source line."""

    # How the message of such a failure begins (to_linalg/bounds.py writes it; spine_bounds_fail in
    # cpp/device_io.c records it like a failed device assertion).
    MARKER = "out-of-bounds "

    @classmethod
    def recognise(cls, failure: DeviceAssertionError) -> DeviceAssertionError:
        """The OutOfBoundsError a reported device failure stands for, or the failure itself. Both
        executors report a recorded failure as "kernel '...': device assertion failed: <record>"."""
        text = str(failure)
        reported = text.find("device assertion failed: " + cls.MARKER)
        if reported < 0:
            return failure
        return cls(text[text.index(cls.MARKER, reported):])
