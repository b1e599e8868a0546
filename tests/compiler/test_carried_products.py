"""A loop's last matrix-unit product adds into the destination its accumulator is stored into whole
(compiler/carried_products.py), from bufferized IR: the call in the loop becomes a run-time choice between
the twin writing the destination (the last step of a loop over a whole tile) and the call as it was, and the
copy after the loop is left to edge tiles; a loop that touches memory a write could alias, a write between
the loop and the copy, or an accumulator used otherwise keep the call and copy as they were, and the twin
goes."""
from spine.compiler.carried_products import carried_products_into_destination
from tests.compiler.ir_rewrites import rewritten as rewritten_by
from tests.to_linalg.test_golden import filecheck

TILE = "memref<8x4xi8, strided<[?, ?], offset: ?>>"
CARRIED_LOOP = f"""
func.func private @product({TILE}, memref<8x16xi32>)
func.func private @into_view({TILE}, memref<8x16xi32>, memref<8x16xi32, strided<[?, 1], offset: ?>>)
func.func @k(%a: memref<?xi8>, %out: memref<?xi32>, %rows: index, %stride: index, %at: index, %n: i32)
    ATTRIBUTES {{
  %c0 = arith.constant 0 : i32
  %c4 = arith.constant 4 : i32
  %acc = memref.alloca() : memref<8x16xi32>
  linalg.fill ins(%c0 : i32) outs(%acc : memref<8x16xi32>)
  scf.for %k = %c0 to %n step %c4 : i32 {{
    %o = arith.index_cast %k : i32 to index
    %view = memref.reinterpret_cast %a to offset: [%o], sizes: [8, 4], strides: [%stride, 1] : memref<?xi8> to memref<8x4xi8, strided<[?, 1], offset: ?>>
    %t = memref.cast %view : memref<8x4xi8, strided<[?, 1], offset: ?>> to {TILE}
    BODY
    func.call @product(%t, %acc) {{spine.carried_twin = "into_view"}} : ({TILE}, memref<8x16xi32>) -> ()
  }}
  BETWEEN
  %dest = memref.reinterpret_cast %out to offset: [%at], sizes: [%rows, 16], strides: [%stride, 1] : memref<?xi32> to memref<?x16xi32, strided<[?, 1], offset: ?>>
  %window = memref.subview %acc[0, 0] [%rows, 16] [1, 1] : memref<8x16xi32> to memref<?x16xi32, strided<[16, 1]>>
  linalg.copy ins(%window : memref<?x16xi32, strided<[16, 1]>>) outs(%dest : memref<?x16xi32, strided<[?, 1], offset: ?>>)
  return
}}
"""
DISJOINT_A = "attributes {spine.disjoint_arguments = array<i64: 0>}"


def rewritten(body: str = "", between: str = "", attributes: str = DISJOINT_A) -> str:
    text = CARRIED_LOOP.replace("ATTRIBUTES", attributes).replace("BODY", body).replace("BETWEEN", between)
    return rewritten_by(text, carried_products_into_destination)


def test_the_last_step_of_a_whole_tile_adds_into_the_destination():
    filecheck(rewritten(), """
CHECK: func.func @k(%[[A:.*]]: memref<?xi8>, %[[OUT:.*]]: memref<?xi32>, %[[ROWS:[a-z0-9]+]]: index, %{{.*}}, %[[N:[a-z0-9]+]]: i32)
CHECK: %[[ACC:.*]] = memref.alloca
CHECK: linalg.fill {{.*}} outs(%[[ACC]]
CHECK: %[[DEST:.*]] = memref.reinterpret_cast %[[OUT]]
CHECK: %[[RUNS:.*]] = arith.cmpi slt, %c0{{.*}}, %[[N]] : i32
CHECK: %[[WHOLE:.*]] = arith.cmpi eq, %[[ROWS]], %c8
CHECK: %[[DIRECT:.*]] = arith.andi %[[RUNS]], %[[WHOLE]]
CHECK: %[[TILE:.*]] = memref.subview %[[DEST]][0, 0] [8, 16] [1, 1]
CHECK: scf.for %[[K:.*]] = {{.*}} {
CHECK: %[[NEXT:.*]] = arith.addi %[[K]], %c4
CHECK: %[[LAST:.*]] = arith.cmpi sge, %[[NEXT]], %[[N]]
CHECK: %[[BOTH:.*]] = arith.andi %[[DIRECT]], %[[LAST]]
CHECK: scf.if %[[BOTH]] {
CHECK-NEXT: func.call @into_view(%{{.*}}, %[[ACC]], %[[TILE]])
CHECK-NEXT: } else {
CHECK-NEXT: func.call @product(%{{.*}}, %[[ACC]])
CHECK-NOT: carried_twin
CHECK: %[[EDGE:.*]] = arith.xori %[[DIRECT]]
CHECK-NEXT: scf.if %[[EDGE]] {
CHECK-NEXT: linalg.copy
""")


def _unchanged(text: str) -> None:
    assert "@into_view" not in text and "carried_twin" not in text
    assert text.count("func.call @product") == text.count("func.call") and "scf.if" not in text


def test_the_alias_safe_variant_is_left_as_it_is():
    """No argument is known to overlap nothing written: C could be one of them."""
    _unchanged(rewritten(attributes=""))


def test_a_loop_reading_an_argument_that_may_overlap_the_destination_is_left_as_it_is():
    _unchanged(rewritten(body="%x = memref.load %out[%o] : memref<?xi32>"))


def test_a_write_between_the_loop_and_the_copy_keeps_the_copy():
    _unchanged(rewritten(between="%i = arith.constant 0 : index\n  memref.store %c0, %out[%i] : memref<?xi32>"))


def test_two_products_into_one_accumulator_are_left_as_they_are():
    second = f"func.call @product(%t, %acc) {{spine.carried_twin = \"into_view\"}} : ({TILE}, memref<8x16xi32>) -> ()"
    _unchanged(rewritten(body=second))


def test_an_accumulator_read_in_the_loop_is_left_as_it_is():
    _unchanged(rewritten(body="%i = arith.constant 0 : index\n    %x = memref.load %acc[%i, %i] : memref<8x16xi32>"))
