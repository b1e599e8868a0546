"""torch.compile through Spine: Inductor's CPU Triton backend, with matrix products and attention as
Triton kernels too (spine/inductor/decompositions.py), so that every compute op of a compiled graph runs
as a Spine kernel.

    import spine.inductor
    spine.inductor.enable()                 # cpu_backend = "triton", Spine's driver, the decompositions
    compiled = torch.compile(model, dynamic=True)
"""
from pathlib import Path

from .. import switches


def _cache_key_pass():
    """A post-grad pass that does nothing: Inductor puts its uuid (a hash of this package's source) into the
    keys of its FX graph and AOTAutograd caches. Those keys see the traced graph, in which a matmul launch is
    an index into a side table of kernels and arguments: without it, a change here (a block size, a
    decomposition) would keep serving graphs compiled before it."""
    from torch._inductor.custom_graph_pass import CustomGraphPass, get_hash_for_files

    class SpineSourceKey(CustomGraphPass):
        def __call__(self, graph):
            pass

        def uuid(self):
            return get_hash_for_files(tuple(sorted(Path(__file__).parent.glob("*.py"))))
    return SpineSourceKey()


def enable(target=None):
    """Turns torch.compile on CPU tensors into Spine kernels, for `target` ("riscv64" or "host"; default
    SPINE_TARGET, itself defaulting to riscv64)."""
    import torch._inductor.config as inductor_config
    import triton

    from spine.driver import CPUDriver
    from . import decompositions

    if target is not None:
        # Inductor's compile workers are separate processes: they read the target from the environment
        switches.TARGET.export(target)
    triton.runtime.driver.set_active(CPUDriver(target=target))
    inductor_config.cpu_backend = "triton"
    if inductor_config.post_grad_custom_post_pass is None:
        inductor_config.post_grad_custom_post_pass = _cache_key_pass()
    decompositions.install()
