"""How tt.reduce seeds its accumulator, from TTIR text (to_linalg/reduce.py): a combiner that is one known
op reduces the whole axis (from its identity, or from the first slice when the op is idempotent), any
other combiner the rest of the axis into the first slice."""
import pytest

from tests.to_linalg.test_branches_ttir import converted
from tests.to_linalg.test_golden import filecheck


def reduce_module(elem: str, combiner: str, before: str = "") -> str:
    """Loads %x (16 elements), runs `before` (which may define %x2 from it) and reduces %x2 or %x."""
    reduced = "%x2" if "%x2" in before else "%x"
    return f"""
module {{
  tt.func public @k(%p: !tt.ptr<{elem}>) {{
    %r = tt.make_range {{end = 16 : i32, start = 0 : i32}} : tensor<16xi32>
    %s = tt.splat %p : !tt.ptr<{elem}> -> tensor<16x!tt.ptr<{elem}>>
    %ptrs = tt.addptr %s, %r : tensor<16x!tt.ptr<{elem}>>, tensor<16xi32>
    %x = tt.load %ptrs : tensor<16x!tt.ptr<{elem}>>
    {before}
    %v = "tt.reduce"({reduced}) <{{axis = 0 : i32}}> ({{
    ^bb0(%a: {elem}, %b: {elem}):
{combiner}
    }}) : (tensor<16x{elem}>) -> {elem}
    tt.store %p, %v : !tt.ptr<{elem}>
    tt.return
  }}
}}
"""


def one_op(op: str, elem: str) -> str:
    return f"""      %c = {op} %a, %b : {elem}
      tt.reduce.return %c : {elem}"""


@pytest.mark.parametrize("op, elem, identity", [
    ("arith.addf", "f32", "-0.000000e+00 : f32"),
    ("arith.mulf", "f32", "1.000000e+00 : f32"),
    ("arith.addi", "i32", "0 : i32"),
    ("arith.xori", "i32", "0 : i32"),
])
def test_sums_and_products_start_from_the_identity(tmp_path, op, elem, identity):
    text = converted(reduce_module(elem, one_op(op, elem)), tmp_path)
    assert "tensor.extract_slice" not in text
    filecheck(text, f"""
CHECK: arith.constant {identity}
CHECK: linalg.generic {{{{.*}}}}["reduction"]{{{{.*}}}} ins(%{{{{.*}}}} : tensor<16x{elem}>)
CHECK-NEXT: ^bb0
CHECK-NEXT: {op}
""")


@pytest.mark.parametrize("op, elem", [("arith.maxnumf", "f32"), ("arith.minimumf", "f32"), ("arith.maxsi", "i32"),
                                      ("arith.ori", "i32")])
def test_idempotent_ops_reduce_the_whole_axis_into_the_first_element(tmp_path, op, elem):
    filecheck(converted(reduce_module(elem, one_op(op, elem)), tmp_path), f"""
CHECK: tensor.extract_slice %{{{{.*}}}}[0] [1] [1] : tensor<16x{elem}> to tensor<{elem}>
CHECK-NEXT: linalg.generic {{{{.*}}}}["reduction"]{{{{.*}}}} ins(%{{{{.*}}}} : tensor<16x{elem}>)
CHECK-NEXT: ^bb0
CHECK-NEXT: {op}
""")


@pytest.mark.parametrize("microkernel, reduced", [("avx512", 16), ("rvv", 15)])
def test_idempotent_ops_keep_the_first_slice_seed_on_scalable_vectors(tmp_path, microkernel, reduced):
    """RVV's remainder is a shorter vector, not a scalar loop: there the max reduces the other 15."""
    text = reduce_module("f32", one_op("arith.maxnumf", "f32")).replace(
        "module {", f'module attributes {{"spine.microkernel" = "{microkernel}"}} {{', 1)
    filecheck(converted(text, tmp_path), f"""
CHECK: linalg.generic {{{{.*}}}}["reduction"]{{{{.*}}}} ins(%{{{{.*}}}} : tensor<{reduced}xf32>)
CHECK-NEXT: ^bb0
CHECK-NEXT: arith.maxnumf
""")


def test_other_combiners_reduce_the_rest_into_the_first_element(tmp_path):
    # a - b is not a known combiner: seeding with the identity or repeating an element would change it
    combiner = """      %c = arith.subf %a, %b : f32
      tt.reduce.return %c : f32"""
    filecheck(converted(reduce_module("f32", combiner), tmp_path), """
CHECK: tensor.extract_slice %{{.*}}[0] [1] [1] : tensor<16xf32> to tensor<f32>
CHECK-NEXT: tensor.extract_slice %{{.*}}[1] [15] [1] : tensor<16xf32> to tensor<15xf32>
CHECK-NEXT: linalg.generic {{.*}}["reduction"]{{.*}} ins(%{{.*}} : tensor<15xf32>)
""")


def test_a_combiner_of_two_ops_is_not_taken_for_its_first(tmp_path):
    combiner = """      %c = arith.addf %a, %b : f32
      %d = arith.mulf %c, %c : f32
      tt.reduce.return %d : f32"""
    filecheck(converted(reduce_module("f32", combiner), tmp_path), """
CHECK: tensor.extract_slice %{{.*}}[1] [15] [1] : tensor<16xf32> to tensor<15xf32>
""")


SUM_OF_SQUARES = reduce_module("f32", one_op("arith.addf", "f32"), before="%x2 = arith.mulf %x, %x : tensor<16xf32>")


def test_elementwise_producers_fuse_into_the_reduction(tmp_path):
    """The squares are computed in the reduction's loop, not written to a buffer first (lowered IR)."""
    from spine.compiler.lower import BUFFERIZE, FUSE_ELEMENTWISE
    from spine.compiler.passes import run_upstream as _run
    from mlir import ir
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(converted(SUM_OF_SQUARES, tmp_path))
        _run(module, FUSE_ELEMENTWISE + "," + BUFFERIZE)
        text = str(module)
    filecheck(text, """
CHECK: linalg.generic {{.*}}["reduction"]
CHECK-NEXT: ^bb0(%[[IN:.*]]: f32, %[[ACC:.*]]: f32):
CHECK-NEXT: %[[SQ:.*]] = arith.mulf %[[IN]], %[[IN]]
CHECK-NEXT: arith.addf %[[ACC]], %[[SQ]]
""")
    assert text.count("linalg.generic") == 1


@pytest.mark.parametrize("elem", ["bf16", "f16"])
def test_half_precision_sums_accumulate_in_fp32_and_round_once(tmp_path, elem):
    filecheck(converted(reduce_module(elem, one_op("arith.addf", elem)), tmp_path), f"""
CHECK: arith.constant -0.000000e+00 : f32
CHECK: linalg.generic {{{{.*}}}}["reduction"]
CHECK-SAME: ins(%{{{{.*}}}} : tensor<16x{elem}>) outs(%{{{{.*}}}} : tensor<f32>)
CHECK-NEXT: ^bb0(%[[IN:.*]]: {elem}, %[[ACC:.*]]: f32):
CHECK-NEXT: %[[WIDE:.*]] = arith.extf %[[IN]] : {elem} to f32
CHECK-NEXT: arith.addf %[[ACC]], %[[WIDE]] fastmath<reassoc> : f32
CHECK: arith.truncf %{{{{.*}}}} : f32 to {elem}
""")


PRODUCTS = reduce_module("bf16", one_op("arith.addf", "bf16"), before="%x2 = arith.mulf %x, %x : tensor<16xbf16>")


def test_half_precision_products_fuse_unrounded_into_their_sum(tmp_path):
    filecheck(converted(PRODUCTS, tmp_path), """
CHECK: linalg.generic {{.*}}["reduction"]{{.*}} ins(%[[X:.*]], %[[X]] : tensor<16xbf16>, tensor<16xbf16>)
CHECK-NEXT: ^bb0(%[[A:.*]]: bf16, %[[B:.*]]: bf16, %[[ACC:.*]]: f32):
CHECK-NEXT: %[[WA:.*]] = arith.extf %[[A]] : bf16 to f32
CHECK-NEXT: %[[WB:.*]] = arith.extf %[[B]] : bf16 to f32
CHECK-NEXT: %[[P:.*]] = arith.mulf %[[WA]], %[[WB]] : f32
CHECK-NEXT: arith.addf %[[ACC]], %[[P]]
""")


def test_without_fp_fusion_the_products_are_rounded_first(tmp_path):
    text = PRODUCTS.replace("module {", "module attributes {spine.no_fp_fusion} {", 1)
    filecheck(converted(text, tmp_path), """
CHECK: arith.mulf %{{.*}}, %{{.*}} : tensor<16xbf16>
CHECK: linalg.generic {{.*}}["reduction"]{{.*}} ins(%{{.*}} : tensor<16xbf16>) outs(%{{.*}} : tensor<f32>)
CHECK-NEXT: ^bb0(%[[IN:.*]]: bf16, %[[ACC:.*]]: f32):
CHECK-NEXT: arith.extf %[[IN]] : bf16 to f32
""")


WIDENED = """
module {
  tt.func public @k(%p: !tt.ptr<bf16>, %q: !tt.ptr<f32>) {
    %r = tt.make_range {end = 16 : i32, start = 0 : i32} : tensor<16xi32>
    %s = tt.splat %p : !tt.ptr<bf16> -> tensor<16x!tt.ptr<bf16>>
    %ptrs = tt.addptr %s, %r : tensor<16x!tt.ptr<bf16>>, tensor<16xi32>
    %x = tt.load %ptrs : tensor<16x!tt.ptr<bf16>>
    %v = "tt.reduce"(%x) <{axis = 0 : i32}> ({
    ^bb0(%a: bf16, %b: bf16):
      %c = arith.addf %a, %b : bf16
      tt.reduce.return %c : bf16
    }) : (tensor<16xbf16>) -> bf16
    %w = arith.extf %v : bf16 to f32
    tt.store %q, %w : !tt.ptr<f32>
    tt.return
  }
}
"""


@pytest.mark.parametrize("fusion", [True, False])
def test_a_sum_widened_back_to_fp32_is_not_rounded_between(tmp_path, fusion):
    text = WIDENED if fusion else WIDENED.replace("module {", "module attributes {spine.no_fp_fusion} {", 1)
    stored = "%[[TOTAL]]" if fusion else "%[[WIDE]]"
    filecheck(converted(text, tmp_path), f"""
CHECK: %[[TOTAL:.*]] = tensor.extract %{{{{.*}}}}[] : tensor<f32>
CHECK: %[[NARROW:.*]] = arith.truncf %[[TOTAL]] : f32 to bf16
{"CHECK-NOT: arith.extf %[[NARROW]]" if fusion else "CHECK: %[[WIDE:.*]] = arith.extf %[[NARROW]] : bf16 to f32"}
CHECK: memref.store {stored}
""")
