"""Division by a loop-invariant divisor through its reciprocal (compiler/reciprocal_division.py): which
divisions the rewrite takes, from loop IR text; and, run on both targets, that `/` stays within 1 ulp of
IEEE division (and almost always equals it) on ordinary and extreme operands, while div_rn stays exact."""
import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from spine.compiler.reciprocal_division import divide_by_reciprocals
from tests.compiler.ir_rewrites import rewritten
from tests.to_linalg.test_golden import filecheck

LOOP = """
func.func @k(%x: memref<64xf32>, %y: memref<64xf32>, %out: memref<64xf32>, %d: f32) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %three = arith.constant 3.0 : f32
  scf.for %i = %c0 to %c64 step %c1 {
    %a = memref.load %x[%i] : memref<64xf32>
    %b = memref.load %y[%i] : memref<64xf32>
    %q = DIVISION
    memref.store %q, %out[%i] : memref<64xf32>
  }
  return
}
"""


def division(text: str, enabled: bool = True) -> str:
    return rewritten(LOOP.replace("DIVISION", text), lambda module: divide_by_reciprocals(module, enabled))


def test_an_invariant_divisor_is_inverted_once_before_the_loop():
    filecheck(division("arith.divf %a, %d fastmath<arcp> : f32"), """
    CHECK: arith.divf %{{.*}}, %{{.*}} : f32
    CHECK: scf.for
    CHECK-NOT: arith.divf
    CHECK: arith.mulf
    CHECK: math.fma
    CHECK: math.fma
    CHECK: arith.cmpf uno
    CHECK: arith.select
    CHECK: memref.store
    """)


def test_a_constant_divisor_is_inverted_too():
    text = division("arith.divf %a, %three fastmath<arcp> : f32")
    assert "math.fma" in text and "arcp" not in text


def test_a_divisor_that_changes_in_the_loop_keeps_its_division_without_the_flag():
    text = division("arith.divf %a, %b fastmath<arcp> : f32")
    assert "arith.divf %{}, %{} : f32".format(*"ab") not in text   # names are renumbered: check the shape
    assert text.count("arith.divf") == 1 and "arcp" not in text and "math.fma" not in text


def test_div_rn_and_disabled_targets_keep_ieee_division():
    for text, enabled in (("arith.divf %a, %d : f32", True), ("arith.divf %a, %d fastmath<arcp> : f32", False)):
        out = division(text, enabled)
        assert out.count("arith.divf") == 1 and "arcp" not in out and "math.fma" not in out


@triton.jit
def divide_by_sum_kernel(x_ptr, out_ptr, n, d, ROUNDED: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    if ROUNDED:
        q = tl.math.div_rn(x, d)
    else:
        q = x / d
    tl.store(out_ptr + offs, q, mask=mask)


EXTREMES = [0.0, -0.0, 1e-45, -1e-40, 1.17e-38, 1.0, -3.0, 3.4e38, -3.4e38, float("inf"), float("-inf"),
            float("nan")]
DIVISORS = [1.0, 3.0, -7.25, 0.1, 1000.5, 1e-40, -1e-45, 1e-30, 2.0 ** -126, 3e38, -3.4e38, 0.0, -0.0,
            float("inf"), float("-inf"), float("nan")]


def ulps(got: torch.Tensor, want: torch.Tensor) -> np.ndarray:
    """Distance in representable floats; 0 where both are NaN or equal."""
    def ordered(t):
        bits = t.numpy().view(np.int32).astype(np.int64)
        return np.where(bits < 0, -(bits & 0x7FFFFFFF), bits)
    same = (got == want).numpy() | (got.isnan() & want.isnan()).numpy()
    distance = np.abs(ordered(got) - ordered(want))
    distance[got.isnan().numpy() != want.isnan().numpy()] = 1 << 40
    return np.where(same, 0, distance)


@pytest.mark.parametrize("divisor", DIVISORS)
def test_division_by_an_invariant_is_within_one_ulp_of_ieee(target, divisor):
    n = 301 if target == "riscv64" else 4099
    exponents = torch.randint(-126, 127, (n,)).float()
    x = torch.cat([torch.randn(n) * torch.exp2(exponents), torch.randn(n), torch.tensor(EXTREMES)])
    out, exact = torch.empty_like(x), torch.empty_like(x)
    for rounded, result in ((False, out), (True, exact)):
        compiled = divide_by_sum_kernel[(triton.cdiv(x.numel(), 256),)](x, result, x.numel(), divisor,
                                                                       ROUNDED=rounded, BLOCK=256)
        divisions = [line for line in compiled.asm["llir"].splitlines() if " fdiv " in line]
        # `/` on x86-64: one division, of 1 by d; on RISC-V and for div_rn, the element's own.
        reciprocal = target == "host" and not rounded
        assert len(divisions) == 1 and ("fdiv float 1.0" in divisions[0]) == reciprocal, divisions
    ieee = x / torch.tensor(divisor, dtype=torch.float32)
    assert ulps(exact, ieee).max() == 0                        # div_rn: IEEE division, untouched
    distance = ulps(out, ieee)
    worst = int(distance.argmax())
    assert distance.max() <= 1, (x[worst].item(), out[worst].item(), ieee[worst].item())
    # Correctly rounded where the residual is a normal number: every dividend above 2^-100 here.
    ordinary = (x.abs() >= 2.0 ** -100) & (ieee.abs() >= 2.0 ** -126)
    assert (distance[ordinary.numpy()] == 0).all()
