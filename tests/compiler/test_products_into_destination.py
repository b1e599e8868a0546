"""A packed matmul's product stored whole is written straight into its destination
(compiler/products_into_destination.py), from bufferized IR: the call with a strided twin and the copy
of its window become a run-time choice between the twin writing the destination and the call and copy;
a product that something else may touch in between keeps its buffer and copy, and its twin goes."""
from spine.compiler.products_into_destination import store_products_in_place
from tests.compiler.ir_rewrites import rewritten as rewritten_by
from tests.to_linalg.test_golden import filecheck

PRODUCT_THEN_STORE = """
func.func private @product(memref<8x16xf32>)
func.func private @into_view(memref<8x16xf32, strided<[?, ?], offset: ?>>)
func.func @k(%out: memref<?xf32>, %row0: index, %rows: index, %stride: index, %at: index) {
  %p = memref.alloc() : memref<8x16xf32>
  func.call @product(%p) {spine.strided_twin = "into_view"} : (memref<8x16xf32>) -> ()
  BETWEEN
  %dest = memref.reinterpret_cast %out to offset: [%at], sizes: [%rows, 16], strides: [%stride, 1] : memref<?xf32> to memref<?x16xf32, strided<[?, 1], offset: ?>>
  %window = memref.subview %p[%row0, 0] [%rows, 16] [1, 1] : memref<8x16xf32> to memref<?x16xf32, strided<[16, 1], offset: ?>>
  linalg.copy ins(%window : memref<?x16xf32, strided<[16, 1], offset: ?>>) outs(%dest : memref<?x16xf32, strided<[?, 1], offset: ?>>)
  memref.dealloc %p : memref<8x16xf32>
  return
}
"""


def rewritten(between: str = "") -> str:
    return rewritten_by(PRODUCT_THEN_STORE.replace("BETWEEN", between), store_products_in_place)


def test_a_whole_tile_calls_the_twin_on_its_destination():
    filecheck(rewritten(), """
CHECK: func.func @k(%{{.*}}: memref<?xf32>, %[[ROW0:[a-z0-9]+]]: index, %[[ROWS:[a-z0-9]+]]: index
CHECK: %[[DEST:.*]] = memref.reinterpret_cast
CHECK: %[[WINDOW:.*]] = memref.subview
CHECK-DAG: arith.cmpi eq, %[[ROW0]], %c0
CHECK-DAG: arith.cmpi eq, %[[ROWS]], %c8
CHECK: scf.if
CHECK-NEXT: %[[VIEW:.*]] = memref.cast %[[DEST]] : memref<?x16xf32, strided<[?, 1], offset: ?>> to memref<8x16xf32, strided<[?, ?], offset: ?>>
CHECK-NEXT: func.call @into_view(%[[VIEW]])
CHECK: } else {
CHECK-NEXT: func.call @product(
CHECK-NOT: strided_twin
CHECK-NEXT: linalg.copy ins(%[[WINDOW]]
CHECK: memref.dealloc
""")


def test_a_product_with_a_write_before_its_copy_keeps_its_buffer():
    text = rewritten("memref.store %f, %p[%c0, %c0] : memref<8x16xf32>".replace(
        "memref.store", "%c0 = arith.constant 0 : index\n  %f = arith.constant 1.0 : f32\n  memref.store"))
    assert "scf.if" not in text and "strided_twin" not in text
    assert "func.func private @product" in text and "@into_view" not in text     # the unused twin goes
