"""Running compiled kernels: the triton driver, the launcher and its C++ fast path, argument packing, and
the executors whose kernel objects run a grid (in-process, or in a QEMU guest server)."""


def __getattr__(name):
    # Lazy, so that `import spine.driver` from triton's backend discovery stays light.
    if name == "CPUDriver":
        from .cpu_driver import CPUDriver
        return CPUDriver
    raise AttributeError(name)


__all__ = ["CPUDriver"]
