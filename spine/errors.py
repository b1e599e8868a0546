"""Exceptions Spine raises to users, and how their messages name a kernel's source line."""
import re

_LOC = re.compile(r'"([^"]+)":(\d+):(\d+)')


def describe_location(loc) -> str:
    """`file:line:col` of the innermost source position in an MLIR location (named locations nest), from
    its printed form, so every stage can name source lines without sharing IR objects."""
    found = _LOC.findall(str(loc))
    if not found:
        return "an unknown source line"
    path, line, col = found[-1]
    return f"{path}:{line}:{col}"


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
