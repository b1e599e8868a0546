"""smt.parallel loops: run their iterations on a team of threads through MLIR's OpenMP dialect.

The frontend marks the loop (`smt.parallel_arg0` on its scf.for, language/smt/parallel_loop.py) and the
conversion keeps the mark. After bufferization, and before buffer-loop-hoisting (which would move an
iteration's buffers out of the loop, where concurrent iterations would share them), each marked loop
without loop-carried values becomes an scf.parallel, preceded by a call telling the runtime how many
programs the grid has and how many iterations the loop has (it picks the team size):

    scf.for %s = %lb to %ub step %st {body} {smt.parallel_arg0}
  becomes
    func.call @spine_smt_parallel_begin(%programs, %iterations)
    scf.parallel (%s) = (%lb) to (%ub) step (%st) {body}

Tiles the conversion allocates once, in the entry block, for every iteration to reuse (to_linalg/load.py's
edge tiles) move into the loop: each iteration gets its own.

convert-scf-to-openmp then makes it an omp.parallel around an omp.wsloop, whose LLVM translation calls
the OpenMP runtime ABI; those calls are renamed spine_kmpc_* (codegen.py's rename-runtime-calls) and
implemented by cpp/parallel_loops.c.
A marked loop with loop-carried values stays a sequential loop.
"""
from __future__ import annotations

from ..ir_names import PARALLEL_LOOP
from ..ir_walk import collect_ops, enclosing_function, inside

TO_OPENMP = "convert-scf-to-openmp"
OPENMP_TO_LLVM = "convert-openmp-to-llvm"
BEGIN = "spine_smt_parallel_begin"


def to_parallel(module) -> bool:
    """Rewrites the marked loops; whether there were any."""
    loops = collect_ops(module, lambda op: op.name == "scf.for" and PARALLEL_LOOP in op.attributes
                        and len(op.results) == 0)
    if not loops:
        return False
    _declare_begin(module)
    for loop in loops:
        parallel = _rewrite(loop)
        _privatize_tiles(parallel)
    return True


def inline_alloca_scopes(module) -> None:
    """convert-scf-to-openmp wraps each iteration in a memref.alloca_scope, whose region must stay one
    block, which convert-scf-to-cf breaks when the body has loops of its own. The body moves out of it,
    between the stack save and restore the scope stands for (an iteration's tiles are freed with it)."""
    from mlir import ir
    from mlir.dialects import llvm
    for scope in collect_ops(module, lambda op: op.name == "memref.alloca_scope"):
        if len(scope.results):
            raise RuntimeError("smt.parallel: an alloca scope with results")
        with ir.InsertionPoint(scope), scope.location:
            saved = llvm.intr_stacksave(llvm.PointerType.get())
        for op in list(scope.regions[0].blocks[0].operations)[:-1]:   # all but memref.alloca_scope.return
            op.operation.move_before(scope)
        with ir.InsertionPoint(scope), scope.location:
            llvm.intr_stackrestore(saved)
        scope.erase()


def with_openmp(pipeline: str) -> str:
    """The LLVM lowering pipeline with the OpenMP dialect's conversion where it must run."""
    passes = pipeline.split(",")
    at = passes.index("convert-to-llvm")
    return ",".join(passes[:at] + [OPENMP_TO_LLVM] + passes[at:])


def _declare_begin(module) -> None:
    from mlir import ir
    from mlir.dialects import func
    i32, i64 = ir.IntegerType.get_signless(32), ir.IntegerType.get_signless(64)
    with ir.InsertionPoint(module.body), ir.Location.unknown():
        decl = func.FuncOp(BEGIN, ir.FunctionType.get([i32, i64], []))
        decl.attributes["sym_visibility"] = ir.StringAttr.get("private")


def _grid_sizes(kernel) -> list:
    """The kernel's num_programs arguments: its arguments end with pid x, y, z and num x, y, z (i32), then
    only memref views of arguments (compiler/entry.py)."""
    from mlir import ir
    args = list(kernel.regions[0].blocks[0].arguments)
    while args and isinstance(args[-1].type, ir.MemRefType):
        args.pop()
    grid = args[-6:]
    if len(grid) != 6 or any(str(a.type) != "i32" for a in grid):
        raise RuntimeError("smt.parallel: the kernel's grid arguments were not found")
    return grid[3:]


def _rewrite(loop) -> None:
    """scf.parallel takes index bounds; triton's loops count in i32 or i64, which the body keeps."""
    from mlir import ir
    from mlir.dialects import arith, func, scf
    bounds = list(loop.operands)[:3]
    counter_type = bounds[0].type
    index = ir.IndexType.get()
    with ir.InsertionPoint(loop), loop.location:
        nx, ny, nz = _grid_sizes(enclosing_function(loop))
        programs = arith.muli(arith.muli(nx, ny), nz)
        lower, upper, step = (v if v.type == index else arith.index_cast(index, v) for v in bounds)
        span = arith.subi(upper, lower)
        iterations = arith.ceildivsi(arith.maxsi(span, arith.constant(index, 0)), step)
        func.call([], BEGIN, [programs, arith.index_cast(ir.IntegerType.get_signless(64), iterations)])
        parallel = scf.ParallelOp([], [lower], [upper], [step], [])
    old = loop.regions[0].blocks[0]
    body = parallel.regions[0].blocks.append(index)
    with ir.InsertionPoint(body), loop.location:
        counter = body.arguments[0] if counter_type == index else arith.index_cast(counter_type, body.arguments[0])
        reduce = scf.ReduceOp([], 0)
    old.arguments[0].replace_all_uses_with(counter)
    for op in list(old.operations)[:-1]:      # all but the scf.yield
        op.operation.move_before(reduce)
    loop.erase()
    return parallel.operation


def _privatize_tiles(parallel) -> None:
    """The conversion allocates some tiles once, in the kernel's entry block, for every iteration of a loop
    to reuse (to_linalg/load.py's edge tiles); concurrent iterations need their own. Such a buffer, used
    only inside the parallel loop, moves to the start of its body. The smt scratch buffers
    (to_linalg/smt_scratch.py) and barriers (to_linalg/smt_threads.py), which the iterations share on
    purpose, are the entry block's allocations with an alignment; they stay."""
    from mlir import ir
    entry = enclosing_function(parallel).regions[0].blocks[0]
    body = parallel.regions[0].blocks[0]
    first = list(body.operations)[0]
    for op in list(entry.operations):
        op = op.operation
        if op.name not in ("memref.alloca", "memref.alloc") or "alignment" in op.attributes or len(op.operands):
            continue
        uses = list(op.results[0].uses)
        if uses and all(inside(getattr(use.owner, "operation", use.owner), parallel) for use in uses):
            op.move_before(first)

