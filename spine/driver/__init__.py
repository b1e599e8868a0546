"""Running compiled kernels: the triton driver, argument packing, and the two executors (in-process on
the host, or in a QEMU guest server)."""


def __getattr__(name):
    # Lazy, so that `import spine.driver` from triton's backend discovery stays light.
    if name == "CPUDriver":
        from .cpu_driver import CPUDriver
        return CPUDriver
    raise AttributeError(name)


__all__ = ["CPUDriver"]
