"""What Inductor's caches must know of Spine. Inductor keys its FX graph and AOTAutograd caches by the traced
graph, in which a matmul launch is an index into a side table of kernels and arguments, and by the uuid of
its custom post-grad pass. A pass that does nothing gives them that uuid: a hash of this package's source
(a block size or a decomposition changed here must not keep serving graphs compiled before it) and whether
matrix products go to Spine, with the target (the same model compiled for riscv64 with Spine's matmul and
for the host with ATen's are two graphs)."""
from __future__ import annotations

from pathlib import Path


def cache_key_pass():
    from torch._inductor.custom_graph_pass import CustomGraphPass, get_hash_for_files

    from .decompositions import routing

    class SpineSourceKey(CustomGraphPass):
        def __call__(self, graph):
            pass

        def uuid(self):
            files = get_hash_for_files(tuple(sorted(Path(__file__).parent.glob("*.py"))))   # bytes
            return f"{files.hex()}:{routing()}"
    return SpineSourceKey()


def install() -> None:
    """Makes the pass Inductor's custom post-grad pass, unless the user has one of their own."""
    import torch._inductor.config as inductor_config
    if inductor_config.post_grad_custom_post_pass is None:
        inductor_config.post_grad_custom_post_pass = cache_key_pass()
