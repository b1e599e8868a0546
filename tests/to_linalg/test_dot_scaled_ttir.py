"""What the conversion makes of tt.dot_scaled, from TTIR text (to_linalg/dot_scaled.py): operands decoded
and scaled in bf16 (f16 beside an fp16 operand), then tt.dot's product; formats it does not take are
refused by name."""
import pytest

from spine.errors import SpineCompilationError
from tests.to_linalg.test_branches_ttir import converted
from tests.to_linalg.test_golden import filecheck
from tests.to_linalg.test_ttir_conversions import POINTERS_32X32, with_microkernel

# c = dot_scaled(a: e4m3 [32, 64] with scales, b: B_FORMAT, scaled when B_SCALE is "scale %sb")
DOT_SCALED = """
module MODULE_ATTRIBUTES{
  tt.func public @k(%p: !tt.ptr<f32>) {
""" + POINTERS_32X32 + """    %bytes = arith.constant dense<56> : tensor<32x64xi8>
    %a = tt.bitcast %bytes : tensor<32x64xi8> -> tensor<32x64xf8E4M3FN>
    %b = arith.constant dense<B_VALUE> : tensor<B_TYPE>
    %sa = arith.constant dense<127> : tensor<32x2xi8>
    %sb = arith.constant dense<-1> : tensor<32x2xi8>
    %zero = arith.constant dense<0.0> : tensor<32x32xf32>
    %d = tt.dot_scaled %a scale %sa, %b B_SCALE, %zero lhs = e4m3 rhs = B_FORMAT {fastMath = FAST_MATH}
      : tensor<32x64xf8E4M3FN>, tensor<32x2xi8> * tensor<B_TYPE>B_SCALE_TYPE -> tensor<32x32xf32>
    tt.store %ptrs, %d : tensor<32x32x!tt.ptr<f32>>
    tt.return
  }
}
"""


def dot_scaled(b_format="e2m1", b_type="32x32xi8", b_value="35", b_scaled=True, fast_math=False,
               microkernel=None):
    text = with_microkernel(DOT_SCALED, microkernel)
    for key, value in (("B_FORMAT", b_format), ("B_TYPE", b_type), ("B_VALUE", b_value),
                       ("B_SCALE_TYPE", ", tensor<32x2xi8>" if b_scaled else ""),
                       ("B_SCALE", "scale %sb" if b_scaled else ""),
                       ("FAST_MATH", "true" if fast_math else "false")):
        text = text.replace(key, value)
    return text


def test_fp8_and_fp4_operands_are_decoded_and_scaled_in_bf16(tmp_path):
    filecheck(converted(dot_scaled(), tmp_path), """
CHECK: arith.truncf {{.*}} : tensor<32x64xf32> to tensor<32x64xbf16>
CHECK: tensor.expand_shape {{.*}} : tensor<32x64xbf16> into tensor<32x2x32xbf16>
CHECK: linalg.generic
CHECK: arith.mulf {{.*}} : f32
CHECK: arith.cmpi eq, {{.*}} : i8
CHECK: linalg.generic
CHECK: arith.shrui {{.*}} : i8
CHECK: tensor.collapse_shape {{.*}} : tensor<32x2x32xbf16> into tensor<64x32xbf16>
CHECK: tensor.expand_shape {{.*}} : tensor<64x32xbf16> into tensor<2x32x32xbf16>
CHECK: linalg.generic {{.*}}iterator_types = ["parallel", "reduction", "parallel"]
CHECK-SAME: tensor<32x64xbf16>, tensor<64x32xbf16>
""")


def test_large_enough_dot_takes_the_packed_matmul(tmp_path):
    filecheck(converted(dot_scaled(microkernel="avx2"), tmp_path), """
CHECK: func.func private @spine_smt_matmul_avx2_
CHECK: func.func @k
CHECK: call @spine_smt_matmul_avx2_
""")


def test_fast_math_keeps_no_nan_scale_check(tmp_path):
    filecheck(converted(dot_scaled(fast_math=True), tmp_path), """
CHECK: tensor.expand_shape
CHECK-NOT: arith.cmpi eq, {{.*}} : i8
CHECK: iterator_types = ["parallel", "reduction", "parallel"]
""")


def test_fp16_operand_makes_the_product_f16(tmp_path):
    filecheck(converted(dot_scaled(b_format="fp16", b_type="64x32xf16", b_value="1.0", b_scaled=False), tmp_path),
              """
CHECK: arith.truncf {{.*}} : tensor<32x64xf32> to tensor<32x64xf16>
CHECK: linalg.generic {{.*}}iterator_types = ["parallel", "reduction", "parallel"]
CHECK-SAME: tensor<32x64xf16>, tensor<64x32xf16>
""")


def test_fp6_operands_are_refused_by_name(tmp_path):
    with pytest.raises(SpineCompilationError, match=r"unsupported operation 'tt.dot_scaled' \(e2m3 \(fp6\)"):
        converted(dot_scaled(b_format="e2m3", b_type="64x32xi8"), tmp_path)
