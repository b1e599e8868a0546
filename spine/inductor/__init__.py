"""torch.compile through Spine: Inductor's CPU Triton backend, with matrix products and attention as
Triton kernels too (spine/inductor/decompositions.py), so that every compute op of a compiled graph runs
as a Spine kernel.

    import spine.inductor
    spine.inductor.enable()                 # cpu_backend = "triton", Spine's driver, the decompositions
    compiled = torch.compile(model, dynamic=True)
"""
from .. import switches


def install():
    """The decompositions and the cache key they need (idempotent): run when Inductor's lowerings are
    imported (spine/aliases.py), and by enable()."""
    from . import cache_key, decompositions
    decompositions.install()
    cache_key.install()


def enable(target=None):
    """Turns torch.compile on CPU tensors into Spine kernels, for `target` ("riscv64" or "host"; default
    SPINE_TARGET, itself defaulting to riscv64)."""
    import torch._inductor.config as inductor_config
    import triton

    from spine.driver import CPUDriver

    if target is not None:
        # Inductor's compile workers are separate processes: they read the target from the environment
        switches.TARGET.export(target)
    driver = CPUDriver(target=target)
    driver.products_through_inductor = True      # on the host target too (decompositions.py)
    triton.runtime.driver.set_active(driver)
    inductor_config.cpu_backend = "triton"
    install()
