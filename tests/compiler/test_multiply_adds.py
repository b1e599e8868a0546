"""Products fused into the adds that use them (compiler/multiply_adds.py): from IR text, and a kernel's
a * b + c on both targets, one rounding with triton's enable_fp_fusion (the default), two without it."""
import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from spine.compiler.multiply_adds import contract_multiply_adds
from spine.targets import has_fused_multiply_add
from tests.compiler.ir_rewrites import rewritten

PRODUCTS = """
func.func @k(%a: vector<16xf32>, %b: vector<16xf32>, %c: vector<16xf32>) -> (vector<16xf32>, vector<16xf32>, vector<16xf32>) {
  %p = arith.mulf %a, %b : vector<16xf32>
  %s = arith.addf %c, %p fastmath<reassoc> : vector<16xf32>
  %q = arith.mulf %a, %c : vector<16xf32>
  %d = arith.subf %q, %b : vector<16xf32>
  %twice = arith.mulf %b, %c : vector<16xf32>
  %t = arith.addf %twice, %a : vector<16xf32>
  %u = arith.addf %t, %twice : vector<16xf32>
  return %s, %d, %u : vector<16xf32>, vector<16xf32>, vector<16xf32>
}
"""


def test_a_product_used_only_by_an_add_or_a_subtract_is_marked():
    text = rewritten(PRODUCTS, contract_multiply_adds)
    assert "%0 = arith.mulf %arg0, %arg1 fastmath<contract>" in text
    assert "arith.addf %arg2, %0 fastmath<reassoc,contract>" in text   # the flags it had are kept
    assert "%2 = arith.mulf %arg0, %arg2 fastmath<contract>" in text
    assert "arith.subf %2, %arg1 fastmath<contract>" in text


def test_a_product_with_two_uses_is_left_alone():
    """Fusing it into one add would leave the other with the rounded product: two values for one product."""
    text = rewritten(PRODUCTS, contract_multiply_adds)
    assert "%4 = arith.mulf %arg1, %arg2 : vector<16xf32>" in text
    assert text.count("contract") == 4


@triton.jit
def multiply_add_kernel(a_ptr, b_ptr, c_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(a_ptr + offs, mask=mask)
    b = tl.load(b_ptr + offs, mask=mask)
    c = tl.load(c_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, a * b + c, mask=mask)


def _exact_fma(a, b, c) -> np.ndarray:
    """fma(a, b, c) in fp32: the product is exact in fp64, the sum rounded once to fp64 and then to fp32,
    which for these magnitudes only differs from one rounding where the fp64 sum lies exactly halfway."""
    return (a.double() * b.double() + c.double()).float().numpy()


@pytest.mark.parametrize("fusion", [True, False])
def test_multiply_add_rounds_once_when_fusion_is_allowed(target, fusion):
    n = 1000  # not a multiple of the block
    a, b = torch.randn(n), torch.randn(n)
    c = -(a * b) + torch.randn(n) * 1e-3   # cancellation: the product's rounding shows in the result
    out = torch.empty(n)
    compiled = multiply_add_kernel[(triton.cdiv(n, 256),)](a, b, c, out, n, BLOCK=256, enable_fp_fusion=fusion)
    llir = compiled.asm["llir"]
    md = compiled.metadata
    if fusion and has_fused_multiply_add(md.triple, md.cpu, md.features):
        assert "fmul contract" in llir or "llvm.fma" in llir or "llvm.fmuladd" in llir
        np.testing.assert_array_equal(out.numpy(), _exact_fma(a, b, c))
    else:   # not allowed, or compiled for a CPU without FMA instructions (x86-64, x86-64-v2)
        assert "contract" not in llir
        np.testing.assert_array_equal(out.numpy(), (a * b + c).numpy())


@pytest.mark.parametrize("triple, cpu", [("x86_64-unknown-linux-gnu", "x86-64-v3"), ("x86_64-unknown-linux-gnu", "x86-64-v2"),
                                         ("riscv64-unknown-linux-gnu", "spacemit-x60")])
def test_the_pass_runs_where_fusion_is_allowed_and_the_cpu_fuses(monkeypatch, triple, cpu):
    """x86-64-v2 has no FMA instructions: LLVM would call the C library's fmaf for every fused pair."""
    from spine.compiler.lower import LoweringChoices, lower_with_record
    from spine.driver import CPUDriver
    monkeypatch.setenv("SPINE_TARGET", "host")
    triton.runtime.driver.set_active(CPUDriver(target="host"))
    a = torch.randn(8)
    linalg = multiply_add_kernel[(1,)](a, a, a, torch.empty(8), 8, BLOCK=8).asm["linalg"]
    for fusion in (True, False):
        choices = LoweringChoices.for_target(triple, cpu=cpu, fp_fusion=fusion)
        _, record = lower_with_record(linalg, choices)
        assert record.ran("contract-multiply-adds") == (fusion and cpu != "x86-64-v2")
