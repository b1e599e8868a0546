"""Streaming (non-temporal) stores for launches that write more than the caches keep.

A store to a line that is not in the cache first reads that line from memory (a read for ownership), then
writes it back when it is evicted: a kernel streaming N bytes out moves 2N. x86's non-temporal stores
write whole lines around the cache and skip the read: at the memory roof a row softmax moves a third less,
a vector add a quarter less. They pay off only when nobody reads the output soon, which is when the launch writes
more than a cache keeps, and that is known only at launch time. So:

- the conversion records a lower bound on the bytes each program stores (to_linalg/store.py);
- the entry point compares the launch's program count with the count that writes SPINE_STREAMING_STORES_MB
  (16 MiB: more than a core's share of the last-level cache on the machines Spine targets, and than all of
  it on most client parts, so the output is gone from the caches before a consumer runs), and keeps the
  answer in the kernel's flag (ir_names.streaming_flag_symbol; written only when it changes: the grid's
  threads share it);
- this pass, on the loops that store element by element into the kernel's arguments, puts a streaming
  version in front of each loop: when the flag is set, a few scalar iterations up to the first address
  aligned to a cache line, then whole lines at a time as vectors stored non-temporally; the loop as it was
  does the rest (the tail, or everything when the flag is clear):

      scf.for %i = %lb to %ub {                  %start = scf.if %flag_set_and_stores_coaligned -> index {
        %x = memref.load %in[%i]                   scf.for %i = %lb to %aligned { ...as before... }
        %y = arith.addf %x, %c                     scf.for %i = %aligned to %end step 16 {
        memref.store %y, %out[%i]        =>          %x = vector.load %in[%i] : vector<16xf32>
      }                                              %y = arith.addf %x, (vector.broadcast %c)
                                                     vector.store %y, %out[%i] {nontemporal, alignment 64}
                                                   }
                                                   scf.yield %end
                                                 } else { scf.yield %lb }
                                                 scf.for %i = %start to %ub { ...as before... }

Why in MLIR and vectorised here, and not by marking the stores for LLVM: LLVM's loop vectoriser gives up
on a loop with a non-temporal store it cannot prove aligned to the vector width, and nothing in a kernel
is; here the alignment is made (the peeled iterations) and the loop body is still the plain elementwise
code the conversion emitted. A loop qualifies when it steps by one with no loop-carried values and its
body is arithmetic, math, loads indexed by the loop index in their last, contiguous dimension (or not at
all), branches on constants, and stores into argument memory indexed like the loads; every store of the
loop must be such a store. A loop that stores into argument memory and does not qualify is left as it was,
and the pass reports it ("gave up on ...": the compiled kernel's facts and SPINE_DUMP_PASSES' pass list).
Stores into the kernel's own buffers are never touched: they are read again at once. Nor are stores into
an argument the kernel also reads: a program may read back what another stored (the layer-norm gradient's
partial sums, accumulated in place under a lock by every program whose row falls on them), which streamed
would come back from memory each time; an in-place update finds its lines in the cache, just read.

Non-temporal stores are weakly ordered. The grid runtime fences them once per thread and launch, before the
thread reports its share done (cpp/grid.c); a program's own later loads see its stores without a fence.
Within a launch, a program may publish its stores to another only through an atomic: in a function with
streaming loops an sfence goes before each atomic operation and fence, since x86's locked instructions are
not documented to order non-temporal stores on every vendor's cores."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..ir_names import streaming_flag_symbol
from ..ir_types import bits
from ..ir_walk import accessed, collect_ops, constant_int, defined_outside, defining_op, through_views, yields

LINE_BYTES = 64          # a cache line: the streaming loop stores one per store and iteration
MIN_VECTOR_BYTES = 16    # the narrowest non-temporal vector store (movntps xmm)
LOOPS = ("scf.for", "scf.while", "scf.parallel", "scf.forall")
# Operations through which a program may publish its earlier stores to other programs of the launch.
PUBLISHING_OPS = ("memref.atomic_rmw", "memref.generic_atomic_rmw", "llvm.atomicrmw", "llvm.cmpxchg",
                  "llvm.fence")


def streaming_programs(bytes_per_program: int, streaming_bytes: int) -> int:
    """The program count from which a launch streams its stores; 0: never (streaming is off, or nothing
    stored is known)."""
    if bytes_per_program <= 0 or streaming_bytes <= 0:
        return 0
    return -(-streaming_bytes // bytes_per_program)


@dataclass
class _Plan:
    """How one loop streams: its stores (the widest first), the number of lanes, and which values of its
    body vary with the loop index (become vectors)."""
    loop: object
    stores: list
    lanes: int
    varying: set = field(default_factory=set)


class _NotStreamable(Exception):
    """Why a loop storing into argument memory cannot stream."""


def stream_stores(module) -> str | None:
    """The rewrite on every kernel function of `module` (the public ones, whose flag the entry point sets).
    Returns what it gave up on, if anything."""
    declared, refused, candidates = set(), [], 0
    for function in _kernel_functions(module):
        streamed, read = 0, _arguments_read(function)
        for loop in collect_ops(function, _innermost_loop):
            if not any(_argument_root(s.operands[1], function) is not None for s in _stores_in(loop)):
                continue
            candidates += 1
            try:
                plan = _plan(loop, function, read)
            except _NotStreamable as why:
                refused.append(str(why))
                continue
            flag = streaming_flag_symbol(_name(function))
            if flag not in declared:
                _declare_flag(module, flag)
                declared.add(flag)
            _stream(plan, flag)
            streamed += 1
        if streamed:
            _fence_publications(function)
    if not refused:
        return None
    return f"gave up on {len(refused)} of {candidates} loops storing into arguments (first: {refused[0]})"


def _kernel_functions(module) -> list:
    return [op.operation for op in module.body.operations
            if op.operation.name == "func.func" and "sym_visibility" not in op.operation.attributes
            and len(op.operation.regions[0].blocks) > 0]


def _name(function) -> str:
    from mlir import ir
    return ir.StringAttr(function.attributes["sym_name"]).value


def _innermost_loop(op) -> bool:
    if op.name != "scf.for":
        return False
    return not collect_ops(op, lambda inner: inner != op and inner.name in LOOPS)


def _stores_in(loop) -> list:
    return collect_ops(loop, lambda op: op.name == "memref.store")


# Reads and the memref each reads (its first operand).
READS = ("memref.load", "memref.copy", "vector.load", "vector.maskedload", "vector.transfer_read",
         "vector.gather")


def _arguments_read(function) -> set:
    """The kernel arguments whose memory `function` reads."""
    read = set()
    for op in collect_ops(function, lambda op: op.name in READS):
        root = _argument_root(op.operands[0], function)
        if root is not None:
            read.add(root)
    return read


def _argument_root(memref, function):
    """The kernel argument whose memory `memref` views, or None (a buffer of the kernel's own, unknown)."""
    root = through_views(memref)
    return root if defining_op(root) is None and root.owner == function.regions[0].blocks[0] else None


# ------------------------------------------------------------------------------------------ analysis


def _plan(loop, function, read: set) -> _Plan:
    """The plan for `loop`, or _NotStreamable saying why it has none."""
    if constant_int(loop.operands[2]) != 1:
        raise _NotStreamable("a loop whose step is not 1")
    if len(loop.results):
        raise _NotStreamable("a loop with loop-carried values")
    index = loop.regions[0].blocks[0].arguments[0]
    stores, loads, varying = [], [], {index}
    _walk_body(loop.regions[0].blocks[0], loop, index, varying, stores, loads, function)
    if not stores:
        raise _NotStreamable("a loop whose stores are in branches")
    stores.sort(key=lambda s: -_element_bytes(s.operands[0].type))
    _check_overlaps(stores, loads, function)
    if any(_argument_root(store.operands[1], function) in read for store in stores):
        raise _NotStreamable("stores into an argument the kernel also reads")
    return _Plan(loop, stores, LINE_BYTES // _element_bytes(stores[0].operands[0].type), varying - {index})


def _walk_body(block, loop, index, varying, stores, loads, function) -> None:
    for op in list(block.operations)[:-1]:
        op = op.operation
        if op.name == "memref.store":
            _check_store(op, loop, index, function)
            stores.append(op)
        elif op.name == "memref.load":
            if _indexed_by_loop(op, loop, index, "a load"):
                if not _in_memory(op.results[0].type):
                    raise _NotStreamable(f"a load of {op.results[0].type} values")
                varying.add(op.results[0])
            loads.append(op)
        elif op.name == "scf.if" and constant_int(op.operands[0]) is not None:
            taken = _taken_block(op)
            if taken is None:
                continue
            _walk_body(taken, loop, index, varying, stores, loads, function)
            varying.update(r for r, given in zip(op.results, yields(taken)) if given in varying)
        elif op.name.startswith(("arith.", "math.")) and not op.regions:
            if index in op.operands:
                raise _NotStreamable(f"{op.name} computes with the loop index")
            if any(v in varying for v in op.operands):
                if not all(_is_scalar_number(r.type) for r in op.results):
                    raise _NotStreamable(f"{op.name} yields index or vector values")
                varying.update(op.results)
        else:
            raise _NotStreamable(f"a loop with {op.name}")


def _taken_block(branch):
    """The block an scf.if whose condition is a constant (split-loops-at-bounds leaves them) runs, or None
    when that branch is an empty else."""
    region = branch.regions[0 if constant_int(branch.operands[0]) else 1]
    return region.blocks[0] if region.blocks else None


def _check_store(op, loop, index, function) -> None:
    if _argument_root(op.operands[1], function) is None:
        raise _NotStreamable("a loop that also stores into a buffer of its own")
    if not _indexed_by_loop(op, loop, index, "a store"):
        raise _NotStreamable("a store whose last index is not the loop index")
    if not _in_memory(op.operands[0].type):
        raise _NotStreamable(f"a store of {op.operands[0].type} values")


def _indexed_by_loop(op, loop, index, what: str) -> bool:
    """Whether the load or store `op` reads or writes element `index` of a contiguous last dimension, every
    other index the same throughout the loop (True), or one place throughout the loop (False). Raises
    _NotStreamable for any other access."""
    memref, indices = accessed(op)
    if not defined_outside(memref, loop):
        raise _NotStreamable(f"{what} through a view made in the loop")
    if all(defined_outside(i, loop) for i in indices):
        return False
    if not indices or indices[-1] != index or not all(defined_outside(i, loop) for i in indices[:-1]):
        raise _NotStreamable(f"{what} indexed by more than the loop index in its last dimension")
    if _last_stride(memref.type) != 1:
        raise _NotStreamable(f"{what} along a dimension that is not contiguous")
    return True


def _last_stride(memref_type):
    from mlir import ir
    strides, _ = ir.MemRefType(memref_type).get_strides_and_offset()
    return strides[-1] if strides else None


def _is_scalar_number(ty) -> bool:
    from mlir import ir
    return isinstance(ty, (ir.IntegerType, ir.FloatType))


def _in_memory(ty) -> bool:
    """Whether a vector of `ty` is laid out in memory as the elements one after another (not i1's bits)."""
    return _is_scalar_number(ty) and bits(ty) in (8, 16, 32, 64)


def _element_bytes(ty) -> int:
    return bits(ty) // 8


def _check_overlaps(stores, loads, function) -> None:
    """Loads of memory the loop stores into: lane by lane as before only when they read the element the
    store writes, through the same view."""
    stored = {_argument_root(s.operands[1], function): s for s in stores}
    for load in loads:
        store = stored.get(_argument_root(load.operands[0], function))
        if store is None:
            continue
        if accessed(load) != accessed(store):
            raise _NotStreamable("a load of memory the loop stores into, elsewhere than it stores")


# ------------------------------------------------------------------------------------------ the rewrite


def _declare_flag(module, flag: str) -> None:
    """The flag the entry point defines (entry.py), declared in the kernel's module."""
    from mlir import ir
    from mlir.dialects import llvm
    with ir.InsertionPoint.at_block_begin(module.body):
        llvm.GlobalOp(ir.IntegerType.get_signless(8), flag, ir.Attribute.parse("#llvm.linkage<external>"))


def _stream(plan: _Plan, flag: str) -> None:
    from mlir import ir
    from mlir.dialects import arith, scf
    loop = plan.loop
    lower, upper = loop.operands[0], loop.operands[1]
    index_type = ir.IndexType.get()
    with ir.InsertionPoint(loop), loop.location:
        aligned, go = _aligned_start(plan, flag, lower, upper)
        branch = scf.IfOp(go, [index_type], has_else=True)
        with ir.InsertionPoint(branch.then_block):
            head = loop.clone(ip=ir.InsertionPoint(branch.then_block))
            head.operands[1] = aligned
            lanes = _index(plan.lanes)
            count = arith.muli(arith.divui(arith.subi(upper, aligned), lanes), lanes)
            end = arith.addi(aligned, count)
            vector_loop = scf.ForOp(aligned, end, lanes)
            with ir.InsertionPoint(vector_loop.body):
                _vector_body(plan, vector_loop.induction_variable)
                scf.YieldOp([])
            scf.YieldOp([end])
        with ir.InsertionPoint(branch.else_block):
            scf.YieldOp([lower])
    loop.operands[0] = branch.results[0]


def _index(value: int):
    from mlir import ir
    from mlir.dialects import arith
    return arith.constant(ir.IndexType.get(), value)


def _aligned_start(plan: _Plan, flag: str, lower, upper):
    """(the first index at which the widest store's address is a line's, at most `upper`; whether the
    streaming loop runs: the flag is set, that address is a whole number of elements away, and every other
    store is aligned to its vector there too)."""
    from mlir import ir
    from mlir.dialects import arith, llvm
    first = plan.stores[0]
    element = _element_bytes(first.operands[0].type)
    address = _address(first, lower)
    misalignment = arith.remui(address, _index(LINE_BYTES))
    gap = arith.remui(arith.subi(_index(LINE_BYTES), misalignment), _index(LINE_BYTES))
    aligned = arith.minsi(arith.addi(lower, arith.divui(gap, _index(element))), upper)
    pointer = llvm.mlir_addressof(ir.Type.parse("!llvm.ptr"), flag)
    value = llvm.load(ir.IntegerType.get_signless(8), pointer)
    go = arith.cmpi(arith.CmpIPredicate.ne, value, arith.constant(ir.IntegerType.get_signless(8), 0))
    go = arith.andi(go, _divisible(address, element))
    for store in plan.stores[1:]:
        vector_bytes = plan.lanes * _element_bytes(store.operands[0].type)
        if vector_bytes >= MIN_VECTOR_BYTES:
            go = arith.andi(go, _divisible(_address(store, aligned), vector_bytes))
    return aligned, go


def _divisible(address, by: int):
    from mlir.dialects import arith
    return arith.cmpi(arith.CmpIPredicate.eq, arith.remui(address, _index(by)), _index(0))


def _address(store, at):
    """The byte address `store` writes in the iteration whose index is `at`, as an index."""
    from mlir.dialects import arith, memref
    target, indices = accessed(store)
    indices = indices[:-1]
    rank = len(indices) + 1
    metadata = memref.ExtractStridedMetadataOp(target)
    offset, strides = metadata.results[1], list(metadata.results)[2 + rank:]
    linear = arith.addi(offset, at)
    for i, stride in zip(indices, strides):
        linear = arith.addi(linear, arith.muli(i, stride))
    base = memref.extract_aligned_pointer_as_index(target)
    return arith.addi(base, arith.muli(linear, _index(_element_bytes(store.operands[0].type))))


def _vector_body(plan: _Plan, index) -> None:
    """The loop's body `plan.lanes` iterations at a time, at the insertion point: varying values as vectors,
    the others as before."""
    values = {plan.loop.regions[0].blocks[0].arguments[0]: index}
    _vector_ops(plan.loop.regions[0].blocks[0], plan, values, {})


def _vector_ops(block, plan: _Plan, values: dict, broadcasts: dict) -> None:
    from mlir import ir
    from mlir.dialects import vector
    for op in list(block.operations)[:-1]:
        op = op.operation
        operands = [values.get(v, v) for v in op.operands]
        if op.name == "scf.if":
            taken = _taken_block(op)
            if taken is None:
                continue
            _vector_ops(taken, plan, values, broadcasts)
            for result, given in zip(op.results, yields(taken)):
                values[result] = values.get(given, given)
        elif op.name == "memref.store":
            stored = _as_vector(op.operands[0], operands[0], plan, broadcasts)
            vector_bytes = plan.lanes * _element_bytes(op.operands[0].type)
            streams = vector_bytes >= MIN_VECTOR_BYTES
            vector.StoreOp(stored, operands[1], operands[2:], nontemporal=streams or None,
                           alignment=vector_bytes if streams else None)
        elif op.results and op.results[0] in plan.varying and op.name == "memref.load":
            values[op.results[0]] = vector.load(_vector_type(op.results[0].type, plan), operands[0], operands[1:])
        elif op.results and op.results[0] in plan.varying:
            vectors = [_as_vector(v, mapped, plan, broadcasts) for v, mapped in zip(op.operands, operands)]
            attributes = {name: op.attributes[name] for name in op.attributes}
            new = ir.Operation.create(op.name, [_vector_type(r.type, plan) for r in op.results], vectors,
                                      attributes)
            values.update(zip(op.results, new.results))
        else:
            new = op.clone(ip=ir.InsertionPoint.current)
            for position, mapped in enumerate(operands):
                new.operands[position] = mapped
            values.update(zip(op.results, new.results))


def _vector_type(ty, plan: _Plan):
    from mlir import ir
    return ir.VectorType.get([plan.lanes], ty)


def _as_vector(original, mapped, plan: _Plan, broadcasts: dict):
    """`mapped` (what the body's value `original` became) as a vector: itself when it varies, broadcast
    otherwise (once per value)."""
    from mlir.dialects import vector
    if original in plan.varying:
        return mapped
    if original not in broadcasts:
        broadcasts[original] = vector.broadcast(_vector_type(original.type, plan), mapped)
    return broadcasts[original]


def _fence_publications(function) -> None:
    """An sfence before each atomic operation and fence of `function`."""
    from mlir import ir
    from mlir.dialects import llvm
    for op in collect_ops(function, lambda op: op.name in PUBLISHING_OPS):
        with ir.InsertionPoint(op), op.location:
            llvm.call_intrinsic(None, "llvm.x86.sse.sfence", [], [], [])
