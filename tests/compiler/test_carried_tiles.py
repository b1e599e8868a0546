"""A loop's carried tile updated in place (compiler/carried_tiles.py): from IR text as elementwise fusion
leaves it, the bufferized loop without its copy, and kernels whose loops update carried tiles against
torch, on both targets."""
import re

import pytest
import torch
import triton
import triton.language as tl

from spine.compiler.carried_tiles import update_carried_tiles_in_place
from tests.compiler.ir_rewrites import rewritten
from tests.to_linalg.test_golden import filecheck

# acc = acc + x[i] over %n steps, as the conversion and elementwise fusion leave it: YIELD is what the loop
# yields (%sum itself, or COPY_BACK: the conversion's copy of it into the argument), BODY_USE what else the
# body does with %acc.
LOOP = """
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @k(%x: tensor<8x4x16xf32>, %init: tensor<4x16xf32>, %n: index) -> tensor<4x16xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %empty = tensor.empty() : tensor<4x16xf32>
  %r = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %init) -> (tensor<4x16xf32>) {
    %xi = tensor.extract_slice %x[%i, 0, 0] [1, 4, 16] [1, 1, 1] : tensor<8x4x16xf32> to tensor<4x16xf32>
    %sum = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
        ins(%acc, %xi : tensor<4x16xf32>, tensor<4x16xf32>) outs(%empty : tensor<4x16xf32>) {
    ^bb0(%a: f32, %b: f32, %o: f32):
      %s = arith.addf %a, %b : f32
      linalg.yield %s : f32
    } -> tensor<4x16xf32>
    BODY_USE
    scf.yield YIELD : tensor<4x16xf32>
  }
  return %r : tensor<4x16xf32>
}
"""
COPY_BACK = ("%back = linalg.copy ins(%sum : tensor<4x16xf32>) outs(%acc : tensor<4x16xf32>) -> tensor<4x16xf32>")


def loop(yielded="%sum", body_use="", copy=False) -> str:
    use = (COPY_BACK + "\n    " + body_use) if copy else body_use
    return LOOP.replace("BODY_USE", use).replace("YIELD", yielded)


def test_an_update_yielded_as_it_is_writes_into_the_argument():
    filecheck(rewritten(loop(), update_carried_tiles_in_place), """
CHECK: scf.for %{{.*}} iter_args(%[[ACC:.*]] = %{{.*}})
CHECK: %[[SUM:.*]] = linalg.generic
CHECK-SAME: ins(%[[ACC]], %{{.*}} : tensor<4x16xf32>, tensor<4x16xf32>) outs(%[[ACC]] : tensor<4x16xf32>)
CHECK: scf.yield %[[SUM]]
""")


def test_an_update_copied_back_into_the_argument_writes_into_it_and_the_copy_goes():
    text = rewritten(loop("%back", copy=True), update_carried_tiles_in_place)
    filecheck(text, """
CHECK: scf.for %{{.*}} iter_args(%[[ACC:.*]] = %{{.*}})
CHECK: %[[SUM:.*]] = linalg.generic
CHECK-SAME: outs(%[[ACC]] : tensor<4x16xf32>)
CHECK: scf.yield %[[SUM]]
""")
    assert "linalg.copy" not in text


def test_bufferization_then_keeps_one_buffer_and_copies_nothing_in_the_loop():
    from mlir import ir
    from spine.compiler.lower import BUFFERIZE
    from spine.compiler.passes import run_upstream

    def bufferized(rewrite) -> str:
        with ir.Context(), ir.Location.unknown():
            module = ir.Module.parse(loop("%back", copy=True).replace(
                "func.func @k(%x: tensor<8x4x16xf32>, %init: tensor<4x16xf32>",
                "func.func @k(%x: tensor<8x4x16xf32> {bufferization.writable = false}, "
                "%init: tensor<4x16xf32> {bufferization.writable = false}"))
            rewrite(module)
            run_upstream(module, BUFFERIZE)
            text = str(module)
            return text[text.index("scf.for"):text.index("return")]
    as_it_was = bufferized(lambda m: None)
    assert "memref.copy" in as_it_was or "linalg.copy" in as_it_was
    in_place = bufferized(update_carried_tiles_in_place)
    assert "memref.copy" not in in_place and "linalg.copy" not in in_place and "memref.alloc" not in in_place


def assert_fresh_output(text: str) -> None:
    """The generic still writes an empty tensor of its own."""
    filecheck(text, """
CHECK: %[[EMPTY:.*]] = tensor.empty() : tensor<4x16xf32>
CHECK: linalg.generic
CHECK-SAME: outs(%[[EMPTY]] : tensor<4x16xf32>)
""")


@pytest.mark.parametrize("case", [
    # the argument is read again after the update: its old value must survive
    dict(body_use="%again = tensor.extract %acc[%c0, %c0] : tensor<4x16xf32>"),
    # the loop yields something else in the argument's place
    dict(yielded="%acc"),
    # the result is used beside the copy back
    dict(yielded="%back", copy=True, body_use="%seen = tensor.extract %sum[%c0, %c0] : tensor<4x16xf32>"),
])
def test_what_else_reads_the_argument_or_the_result_keeps_the_fresh_output(case):
    assert_fresh_output(rewritten(loop(**case), update_carried_tiles_in_place))


def test_a_body_that_reads_its_output_or_an_input_from_outside_the_loop_is_left_alone():
    reads_output = loop().replace("%s = arith.addf %a, %b : f32", "%s0 = arith.addf %a, %b : f32\n"
                                  "      %s = arith.addf %s0, %o : f32")
    assert_fresh_output(rewritten(reads_output, update_carried_tiles_in_place))
    assert_fresh_output(rewritten(loop().replace("ins(%acc, %xi", "ins(%init, %xi"), update_carried_tiles_in_place))


def test_a_reduction_is_left_alone():
    reduction = loop().replace('["parallel", "parallel"]', '["parallel", "reduction"]')
    assert_fresh_output(rewritten(reduction, update_carried_tiles_in_place))


@triton.jit
def column_sums_kernel(x_ptr, sums_ptr, maxima_ptr, rows, cols, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    """Each column block's sum and running max over the rows, BLOCK_R rows a step (the layer-norm tutorial's
    dw/db reduction, and a max beside it)."""
    c = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    total = tl.zeros((BLOCK_R, BLOCK_C), dtype=tl.float32)
    top = tl.full((BLOCK_R, BLOCK_C), float("-inf"), dtype=tl.float32)
    for start in range(0, rows, BLOCK_R):
        r = start + tl.arange(0, BLOCK_R)
        mask = (r[:, None] < rows) & (c[None, :] < cols)
        x = tl.load(x_ptr + r[:, None] * cols + c[None, :], mask=mask, other=0.0).to(tl.float32)
        total += x
        top = tl.maximum(top, tl.where(mask, x, float("-inf")))
    tl.store(sums_ptr + c, tl.sum(total, axis=0), mask=c < cols)
    tl.store(maxima_ptr + c, tl.max(top, axis=0), mask=c < cols)


@triton.jit
def decayed_sum_kernel(x_ptr, out_ptr, steps, n, decay, BLOCK: tl.constexpr):
    """out = sum over steps s of decay^(steps - 1 - s) x[s]: acc = acc * decay + x, a carried tile scaled."""
    cols = tl.arange(0, BLOCK)
    mask = cols < n
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for s in range(steps):
        acc = acc * decay + tl.load(x_ptr + s * n + cols, mask=mask, other=0.0)
    tl.store(out_ptr + cols, acc, mask=mask)


@pytest.mark.parametrize("rows,cols", [(64, 1536), (37, 45), (5, 130)])
def test_column_sums_and_maxima(target, rows, cols):
    x = torch.randn(rows, cols).half()
    sums, maxima = torch.empty(cols), torch.empty(cols)
    column_sums_kernel[(triton.cdiv(cols, 128),)](x, sums, maxima, rows, cols, BLOCK_R=32, BLOCK_C=128)
    torch.testing.assert_close(sums, x.float().sum(dim=0), rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(maxima, x.float().amax(dim=0))


@pytest.mark.parametrize("steps,n", [(1, 16), (7, 45), (20, 300)])
def test_a_decayed_sum(target, steps, n):
    x = torch.randn(steps, n)
    out = torch.empty(n)
    decayed_sum_kernel[(1,)](x, out, steps, n, 0.9, BLOCK=triton.next_power_of_2(n))
    expected = torch.zeros(n)
    for s in range(steps):
        expected = expected * 0.9 + x[s]
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kernel", [column_sums_kernel, decayed_sum_kernel])
def test_the_kernels_update_their_carried_tiles_in_place(kernel, tmp_path, monkeypatch, fresh_cache):
    from spine.driver import CPUDriver
    triton.runtime.driver.set_active(CPUDriver(target="host"))
    monkeypatch.setenv("SPINE_DUMP_PASSES", str(tmp_path))
    if kernel is column_sums_kernel:
        x = torch.randn(37, 45).half()
        kernel[(1,)](x, torch.empty(45), torch.empty(45), 37, 45, BLOCK_R=32, BLOCK_C=128)
    else:
        kernel[(1,)](torch.randn(7, 45), torch.empty(45), 7, 45, 0.9, BLOCK=64)
    text = (tmp_path / f"{kernel.__name__}.passes.txt").read_text()
    assert "update-carried-tiles-in-place: changed" in text, text
    # no copy of a carried tile (fp32, the tile's shape) inside the loop
    bufferized = next(tmp_path.glob(f"{kernel.__name__}.*-bufferize.mlir")).read_text()
    in_loop = bufferized[bufferized.index("scf.for"):bufferized.index("return")]
    tile = "memref<32x128xf32>" if kernel is column_sums_kernel else "memref<64xf32>"
    t = re.escape(tile)
    assert not re.search(rf"ins\(%\w+ : {t}\) outs\(%\w+ : {t}\)|memref\.copy .* : {t} to {t}", in_loop), in_loop
