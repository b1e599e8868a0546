"""Stage `ttir`: triton's own TTIR clean-up passes.

Block pointers and tensor descriptors are kept as they are: their structure is what lets the
conversion emit strided, vectorisable copies.
"""
from __future__ import annotations


def run_ttir_passes(mod, metadata):
    from triton._C.libtriton import ir, passes
    pm = ir.pass_manager(mod.context)
    pm.enable_debug()
    passes.common.add_inliner(pm)
    passes.common.add_canonicalizer(pm)
    passes.ttir.add_combine(pm)
    passes.ttir.add_reorder_broadcast(pm)
    passes.common.add_cse(pm)
    passes.common.add_symbol_dce(pm)
    passes.ttir.add_loop_unroll(pm)
    pm.run(mod, "make_ttir")
    metadata["name"] = mod.get_entry_func_name()
    metadata["shared"] = 0
    return mod
