"""A matrix product's B is packed once per launch on each thread where no program writes it
(compiler/shared_panels.py), from bufferized IR: a call whose B is a view of a read-only argument calls the
product's twin with `true`; B chosen by an edge tile's branch (the zero-padded copy or the argument in place)
passes the branch's condition, the copy's side false; B that may be written, a local buffer, or the
alias-safe variant keep the call, the pass says how many, and the unused twin goes. Which arguments are read
only (compiler/read_only.py): a linalg op's ins and a product's A and B are read, its outs and memref.copy's
target written."""
from spine.compiler.read_only import read_only_arguments
from spine.compiler.shared_panels import share_packed_panels
from tests.compiler.ir_rewrites import rewritten as rewritten_by
from tests.to_linalg.test_golden import filecheck

A = "memref<8x4xi8, strided<[?, ?], offset: ?>>"
B = "memref<4x16xi8, strided<[?, ?], offset: ?>>"
C = "memref<8x16xi32>"
PRODUCT = f"""
func.func private @product({A} {{spine.read_only}}, {B} {{spine.read_only}}, {C}) attributes {{spine.shared_panel_twin = "kept"}}
func.func private @kept({A} {{spine.read_only}}, {B} {{spine.read_only}}, {C}, i1)
func.func @k(%a: memref<?xi8>, %b: memref<?xi8>, %out: memref<?xi32>, %stride: index, %at: index, %n: index, %edge: i1)
    ATTRIBUTES {{
  %c0 = arith.constant 0 : i32
  %acc = memref.alloca() : {C}
  linalg.fill ins(%c0 : i32) outs(%acc : {C})
  %va = memref.reinterpret_cast %a to offset: [%at], sizes: [8, 4], strides: [%stride, 1] : memref<?xi8> to memref<8x4xi8, strided<[?, 1], offset: ?>>
  %ta = memref.cast %va : memref<8x4xi8, strided<[?, 1], offset: ?>> to {A}
  BTILE
  BODY
  func.call @product(%ta, %tb, %acc) : ({A}, {B}, {C}) -> ()
  return
}}
"""
IN_PLACE = f"""
  %vb = memref.reinterpret_cast %b to offset: [%at], sizes: [4, 16], strides: [%stride, 1] : memref<?xi8> to memref<4x16xi8, strided<[?, 1], offset: ?>>
  %tb = memref.cast %vb : memref<4x16xi8, strided<[?, 1], offset: ?>> to {B}
"""
# the edge tile's branch as bufferization leaves it: the zero-padded copy where %edge holds, else in place
EDGE = f"""
  %local = memref.alloca() : memref<4x16xi8>
  %tb = scf.if %edge -> ({B}) {{
    %z = arith.constant 0 : i8
    linalg.fill ins(%z : i8) outs(%local : memref<4x16xi8>)
    %src = memref.reinterpret_cast %b to offset: [%at], sizes: [4, %n], strides: [%stride, 1] : memref<?xi8> to memref<4x?xi8, strided<[?, 1], offset: ?>>
    %dst = memref.subview %local[0, 0] [4, %n] [1, 1] : memref<4x16xi8> to memref<4x?xi8, strided<[16, 1]>>
    linalg.copy ins(%src : memref<4x?xi8, strided<[?, 1], offset: ?>>) outs(%dst : memref<4x?xi8, strided<[16, 1]>>)
    %cast = memref.cast %local : memref<4x16xi8> to {B}
    scf.yield %cast : {B}
  }} else {{
    %vb = memref.reinterpret_cast %b to offset: [%at], sizes: [4, 16], strides: [%stride, 1] : memref<?xi8> to memref<4x16xi8, strided<[?, 1], offset: ?>>
    %cast = memref.cast %vb : memref<4x16xi8, strided<[?, 1], offset: ?>> to {B}
    scf.yield %cast : {B}
  }}
"""
DISJOINT = "attributes {spine.disjoint_arguments = array<i64: 0, 1>}"


def _text(b_tile: str = IN_PLACE, body: str = "", attributes: str = DISJOINT) -> str:
    return PRODUCT.replace("ATTRIBUTES", attributes).replace("BTILE", b_tile).replace("BODY", body)


def rewritten(b_tile: str = IN_PLACE, body: str = "", attributes: str = DISJOINT) -> str:
    return rewritten_by(_text(b_tile, body, attributes), share_packed_panels)


def test_a_read_only_b_is_kept_for_the_launch():
    filecheck(rewritten(), """
CHECK-NOT: func.func private @product(
CHECK: func.func private @kept(
CHECK: func.func @k(
CHECK: %[[TB:.*]] = memref.cast %{{.*}} to memref<4x16xi8
CHECK: %[[TRUE:.*]] = arith.constant true
CHECK-NEXT: call @kept(%{{.*}}, %[[TB]], %{{.*}}, %[[TRUE]])
CHECK-NOT: call @product
""")


def test_an_edge_tiles_copy_is_not_kept():
    """The copy is a local buffer, refilled by every program at one address: kept only where %edge is false."""
    filecheck(rewritten(EDGE), """
CHECK: func.func @k(%{{.*}}, %[[EDGE:[a-z0-9]+]]: i1)
CHECK: %[[TB:.*]] = scf.if %[[EDGE]]
CHECK: %[[KEEP:.*]] = arith.xori %[[EDGE]], %true
CHECK-NEXT: call @kept(%{{.*}}, %[[TB]], %{{.*}}, %[[KEEP]])
""")


def test_the_copy_on_the_other_side_passes_the_condition_itself():
    swapped = EDGE.replace("scf.if %edge", "scf.if %flip")
    text = _text(swapped).replace("%edge: i1)", "%edge: i1, %flip: i1)")
    # the branch with its sides exchanged: in place where %flip holds
    then_start, else_start = text.index("%tb = scf.if %flip"), text.index("} else {")
    end = text.index("  }\n", else_start)
    then_side = text[text.index("{", then_start) + 1:else_start]
    else_side = text[else_start + len("} else {"):end]
    text = text[:text.index("{", then_start) + 1] + else_side + "} else {" + then_side + text[end:]
    filecheck(rewritten_by(text, share_packed_panels), """
CHECK: func.func @k(%{{.*}}, %[[FLIP:[a-z0-9]+]]: i1)
CHECK: %[[TB:.*]] = scf.if %[[FLIP]]
CHECK: call @kept(%{{.*}}, %[[TB]], %{{.*}}, %[[FLIP]])
""")


def _unchanged(text: str) -> None:
    assert "@kept" not in text, text
    assert "call @product(" in text


def test_the_alias_safe_variant_keeps_nothing():
    """No argument is known to overlap nothing written: B could be C."""
    _unchanged(rewritten(attributes=""))


def test_b_written_by_the_kernel_is_not_kept():
    for write in ("%x = arith.constant 1 : i8\n  memref.store %x, %b[%at] : memref<?xi8>",
                  "%x = arith.constant 1 : i8\n  %w = memref.subview %b[0] [4] [1] : memref<?xi8> to memref<4xi8, strided<[1]>>\n"
                  "  linalg.fill ins(%x : i8) outs(%w : memref<4xi8, strided<[1]>>)",
                  "%w = memref.subview %b[0] [4] [1] : memref<?xi8> to memref<4xi8, strided<[1]>>\n"
                  "  %s = memref.subview %a[0] [4] [1] : memref<?xi8> to memref<4xi8, strided<[1]>>\n"
                  "  memref.copy %s, %w : memref<4xi8, strided<[1]>> to memref<4xi8, strided<[1]>>"):
        _unchanged(rewritten(body=write))


def test_b_not_among_the_disjoint_arguments_is_not_kept():
    _unchanged(rewritten(attributes="attributes {spine.disjoint_arguments = array<i64: 0>}"))


def test_b_in_a_local_buffer_is_not_kept():
    local = f"""
  %lb = memref.alloca() : memref<4x16xi8>
  %tb = memref.cast %lb : memref<4x16xi8> to {B}
"""
    _unchanged(rewritten(local))


def test_the_pass_says_how_many_products_kept_no_panel():
    from mlir import ir
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(_text(attributes=""))
        assert share_packed_panels(module) == "kept no panel for 1 of 1 products (B may be written)"
        module = ir.Module.parse(_text())
        assert share_packed_panels(module) is None


def _read_only(body: str = "", attributes: str = DISJOINT) -> list:
    from mlir import ir
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(_text(body=body, attributes=attributes))
        function = next(op for op in module.body.operations
                        if ir.StringAttr(op.attributes["sym_name"]).value == "k")
        return sorted(ir.BlockArgument(v).arg_number for v in read_only_arguments(function))


def test_what_only_reads_an_argument_leaves_it_read_only():
    """The product reads A and B (its READ_ONLY_ARGUMENT arguments); a linalg.copy reads its ins."""
    copy = ("%w = memref.subview %b[0] [4] [1] : memref<?xi8> to memref<4xi8, strided<[1]>>\n"
            "  %l = memref.alloca() : memref<4xi8>\n"
            "  linalg.copy ins(%w : memref<4xi8, strided<[1]>>) outs(%l : memref<4xi8>)")
    assert _read_only() == [0, 1]
    assert _read_only(copy) == [0, 1]
    assert _read_only(attributes="") == []


def test_a_call_without_read_only_arguments_writes_them():
    assert _read_only(body="func.call @kept(%ta, %tb, %acc, %edge) : ({A}, {B}, {C}, i1) -> ()".format(
        A=A, B=B, C=C)) == [0, 1]
    unmarked = _text().replace("{spine.read_only}", "")
    from mlir import ir
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(unmarked)
        function = next(op for op in module.body.operations
                        if ir.StringAttr(op.attributes["sym_name"]).value == "k")
        assert read_only_arguments(function) == set()
