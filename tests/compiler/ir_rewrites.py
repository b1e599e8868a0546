"""Running one of the lowering's rewrites on IR text, the way MLIR's own tests run a pass."""


def rewritten(text: str, rewrite) -> str:
    """The module `text` after `rewrite(module)`, verified, as text."""
    from mlir import ir
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        rewrite(module)
        module.operation.verify()
        return str(module)


# A masked tl.load of a read-only argument as bufferization leaves it: %w is a 1024-lane tile of %arg at
# offset %o, read in place when whole and copied with %pad_value past lane %n when CONDITION holds (replace
# it: `%partial` is %n != 1024). The function around it defines %arg, %n, %o and %pad_value.
EDGE_TILE_BRANCH = """
  %c1024 = arith.constant 1024 : index
  %buf = memref.alloca() : memref<1024xf32>
  %partial = arith.cmpi ne, %n, %c1024 : index
  %w = scf.if CONDITION -> (memref<1024xf32, strided<[1], offset: ?>>) {
    %cast = memref.cast %buf : memref<1024xf32> to memref<1024xf32, strided<[1], offset: ?>>
    %rest = arith.subi %c1024, %n : index
    %pad = memref.subview %buf[%n] [%rest] [1] : memref<1024xf32> to memref<?xf32, strided<[1], offset: ?>>
    linalg.fill ins(%pad_value : f32) outs(%pad : memref<?xf32, strided<[1], offset: ?>>)
    %src = memref.reinterpret_cast %arg to offset: [%o], sizes: [%n], strides: [1] : memref<?xf32> to memref<?xf32, strided<[1], offset: ?>>
    %dst = memref.subview %buf[0] [%n] [1] : memref<1024xf32> to memref<?xf32, strided<[1]>>
    linalg.copy ins(%src : memref<?xf32, strided<[1], offset: ?>>) outs(%dst : memref<?xf32, strided<[1]>>)
    scf.yield %cast : memref<1024xf32, strided<[1], offset: ?>>
  } else {
    %whole = memref.reinterpret_cast %arg to offset: [%o], sizes: [1024], strides: [1] : memref<?xf32> to memref<1024xf32, strided<[1], offset: ?>>
    scf.yield %whole : memref<1024xf32, strided<[1], offset: ?>>
  }
"""
