"""triton-cpu's way of choosing the driver, on triton's own `triton.runtime.driver`: code written for that
fork calls `triton.runtime.driver.set_active_to_cpu()` where code for stock triton calls
`set_active(CPUDriver())`. The import of triton.runtime.driver is followed by `install` (spine/aliases.py),
which gives triton's DriverConfig the fork's three methods:

    set_active_to_cpu()   Spine's CPUDriver() becomes the active driver (its target: SPINE_TARGET, else
                          riscv64; SPINE_TARGET=host runs kernels natively, as triton-cpu does)
    set_active_to_gpu()   the one GPU driver that is active becomes the active driver, and its name is
                          returned; a RuntimeError saying how many there are when there is not exactly one
    get_active_gpus()     the names of the GPU backends whose driver is active ([] without a GPU)
"""
from __future__ import annotations

CPU_BACKEND = "cpu"    # the name pyproject.toml's triton.backends entry point gives Spine


def _set_active_to_cpu(self) -> None:
    from ..driver.cpu_driver import CPUDriver
    self.set_active(CPUDriver())


def _active_gpus() -> list:
    from triton.backends import backends
    return [(name, backend.driver) for name, backend in backends.items()
            if name != CPU_BACKEND and backend.driver.is_active()]


def _set_active_to_gpu(self) -> str:
    gpus = _active_gpus()
    if len(gpus) != 1:
        raise RuntimeError(f"set_active_to_gpu: {len(gpus)} GPU drivers are active "
                           f"({', '.join(name for name, _ in gpus) or 'this machine has no GPU triton can use'}); "
                           "there must be exactly one")
    name, driver = gpus[0]
    self.set_active(driver())
    return name


def _get_active_gpus(self) -> list:
    return [name for name, _ in _active_gpus()]


def install() -> None:
    """Adds the methods to triton.runtime.driver's DriverConfig, where it has none of its own."""
    import sys
    config = getattr(sys.modules.get("triton.runtime.driver"), "DriverConfig", None)
    if config is None:   # not imported yet: the import itself is followed (spine/aliases.py)
        return
    for name, method in (("set_active_to_cpu", _set_active_to_cpu), ("set_active_to_gpu", _set_active_to_gpu),
                         ("get_active_gpus", _get_active_gpus)):
        if not hasattr(config, name):
            setattr(config, name, method)
