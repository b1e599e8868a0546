"""Stage `ttir`: triton's own TTIR clean-up passes.

Block pointers are kept as they are: their structure is what lets the conversion emit strided,
vectorisable copies. Tensor descriptors are rewritten into masked pointer arithmetic here.
"""
from __future__ import annotations


def run_ttir_passes(mod, metadata):
    from triton._C.libtriton import ir, passes
    pm = ir.pass_manager(mod.context)
    pm.enable_debug()
    passes.common.add_inliner(pm)
    # Tensor descriptors become pointer arithmetic with masks, which the conversion recognises as
    # structured block copies (there is no TMA engine to target).
    passes.ttir.add_rewrite_tensor_descriptor_to_pointer(pm)
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


def record_microkernel(mod, triple: str, cpu: str, features: str, matrix_unit: bool = True) -> None:
    """Name the target's packed-matmul micro-kernel on the module (`spine.microkernel`), so that the
    conversion, which sees only TTIR, can lower tt.dot to it (to_linalg/dot.py)."""
    from triton._C.libtriton import ir

    from ..ir_names import MICROKERNEL_ATTRIBUTE
    from ..microkernels import choose
    kernel = choose(triple, cpu, features, matrix_unit)
    mod.set_attr(MICROKERNEL_ATTRIBUTE, ir.builder(mod.context).get_string_attr(kernel.name))


def record_prefetch(mod, triple: str, cpu: str) -> None:
    """Mark the module (`spine.prefetch_next_program`) when the target's cores gain from a row-wise kernel
    prefetching the next program's row (targets.prefetches_next_program, to_linalg/prefetch.py)."""
    from triton._C.libtriton import ir

    from ..ir_names import PREFETCH_ATTRIBUTE
    from ..targets import prefetches_next_program
    if prefetches_next_program(triple, cpu):
        mod.set_attr(PREFETCH_ATTRIBUTE, ir.builder(mod.context).get_unit_attr())


def record_fp_fusion(mod, enable_fp_fusion: bool) -> None:
    """Mark the module (`spine.no_fp_fusion`) when products may not be fused into the sums that consume them:
    the conversion then keeps every rounding the kernel's types ask for (to_linalg/reduce.py)."""
    from triton._C.libtriton import ir

    from ..ir_names import NO_FP_FUSION_ATTRIBUTE
    if not enable_fp_fusion:
        mod.set_attr(NO_FP_FUSION_ATTRIBUTE, ir.builder(mod.context).get_unit_attr())
