"""Tests whose own `is_cpu()` branches describe the triton-cpu fork's CPU backend, not Spine.

The fork's tests skip, xfail or shrink themselves on a CPU where its backend fell short ("Flip does not
work correctly on CPU", "Barriers not yet implemented for CPU backend", "Large loads unsupported on CPU",
fp8 formats it rejects). Triton's interpreter runs those tests whole, so Spine must too: while one of the
tests below runs, the plugin replaces the named helpers of triton._internal_testing in the suite's modules,
so the test takes the branch every other backend takes.

    test function → ({helper: value it returns}, why)

CPU branches left alone: test_dot's size limit (a smaller case, not a skip; its bf16x3/bf16x6 xfail is a
skip under the interpreter too) and test_enable_fp_fusion-style checks of the CPU backend's own LLVM IR.
"""
from __future__ import annotations

AS_OTHER_BACKENDS = {
    # test_core.py
    "test_abs_fp8": ({"is_cpu": False}, "skips every fp8 format on CPU ('CPU not supports fp8e4b15')"),
    "test_tensor_atomic_add_non_exclusive_offset": ({"is_cpu": False}, "xfails size 128 ('Test hangs')"),
    "test_atomic_cas": ({"is_cpu": False}, "xfails every case ('Barriers not yet implemented for CPU backend')"),
    "test_tensor_atomic_cas": ({"is_cpu": False}, "xfails float dtypes ('CPU does not support atomic cas with "
                                                  "float types yet')"),
    "test_cast": ({"is_cpu": False}, "skips fp8 casts and shrinks fp32→fp16 and bf16 cases (an LLVM bug of "
                                     "the fork's)"),
    "test_scan2d": ({"is_cpu": False}, "shrinks bf16 shapes to 128 (an LLVM bug of the fork's)"),
    # check_type_supported() skips float8e4b15 on CPU
    "test_permute": ({"is_cpu": False}, "skips float8e4b15 ('float8e4b15 not supported on CPU')"),
    "test_dot_max_num_imprecise_acc": ({"is_cpu": False}, "skips float8e4b15 ('float8e4b15 not supported on CPU')"),
    "test_trans_4d": ({"is_cpu": False}, "xfails large perm[0] == 3 cases ('Codegen explosion on CPU')"),
    # the GPU branch skips BLOCK < 16, which this file's CPU parametrisation (4 x 4 blocks) always hits; the
    # interpreter's branch runs every case
    "test_dot3d": ({"is_cpu": False, "is_interpreter": True},
                   "skips float16 results ('float16 accuracy issue') and blocks under 4"),
    # test_standard.py
    "test_flip": ({"is_cpu": False}, "skips flips of 3-D tensors unless M or N is 1, xfails last-axis flips"),
    # test_block_pointer.py
    "test_block_copy": ({"is_cpu": False}, "skips boundary_check='lower' ('NYI for CPU')"),
    "test_block_ptr_matmul_no_scf": ({"is_cpu": False}, "shrinks the matmul to 16 x 16 (compile time)"),
    # test_conversions.py
    "test_typeconvert_upcast": ({"is_cpu": False}, "expects fp8e4b8 and fp8e4b15 to be rejected and checks "
                                                   "no upcast at all"),
    "test_typeconvert_downcast": ({"is_cpu": False}, "skips downcasts to fp8e4b15 and fp8e4b8, checks 16 of "
                                                     "the 256 input slices"),
    "test_typeconvert_downcast_clamping": ({"is_cpu": False}, "xfails every case ('NYI in CPU backend')"),
    # test_tensor_descriptor.py
    "test_tensor_descriptor_load": ({"is_cpu": False}, "skips blocks over 32 rows ('Large loads')"),
    "test_tensor_descriptor_store": ({"is_cpu": False}, "skips blocks over 32 rows ('Large stores')"),
    "test_tensor_descriptor_load3d": ({"is_cpu": False}, "skips K blocks over 32 ('Large loads')"),
    "test_tensor_descriptor_store3d": ({"is_cpu": False}, "skips K blocks over 32 ('Large stores')"),
    "test_tensor_descriptor_load_nd": ({"is_cpu": False}, "skips inner blocks over 32 ('Large block size')"),
    "test_tensor_descriptor_store_nd": ({"is_cpu": False}, "skips inner blocks over 32 ('Large block size')"),
    "test_tensor_descriptor_padding": ({"is_cpu": False}, "runs no host-side descriptor"),
}
