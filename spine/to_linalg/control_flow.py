"""scf.for and scf.if with their regions converted in place.

Loop-carried pointers keep their structure: a PointerState (or AffineIndex) whose base and strides stay
the same across iterations is carried as its offset alone, so `a_ptrs += BLOCK_K * stride_ak` in a K loop
stays a strided block load. When the strides do change inside the loop the converter starts again with
that value carried as a gather (RetryWithGather). Pointers an scf.if yields travel the same way (IfResult).

Boolean tensors cross region boundaries as their i8 bytes (BoolBytes): an i1 tensor yielded by a loop or an
if would be bufferized into an i1 buffer, which MLIR's LLVM lowering cannot store to."""
from __future__ import annotations

from dataclasses import dataclass, replace

from mlir import ir
from mlir.dialects import linalg, scf

from ..ir_names import PARALLEL_LOOP
from . import index_math as im
from . import materialize
from . import smt_threads  # noqa: F401  (registers the lowerings of the smt barrier calls)
from . import states as st
from .converter import RetryWithGather, handles
from .addresses import address_of, pointer_at
from .types import is_bool, is_pointer


@dataclass(frozen=True)
class Carried:
    """How one loop-carried value travels through the loop's region boundary, as zero or more values."""
    kind: str          # "value"; "offset" (structured: offset only); "offsets" (block pointer: per-dim
    template: object = None  # offsets); "gather" (offsets tensor); "bytes" (boolean tensor as i8);
    #                          "wrapped" (a WrappedPointer: its affine form's offset; condition and
    #                          correction stay those it entered with)

    def initial(self, state) -> list:
        if self.kind == "offset":
            return [im.as_value(state.offset)]
        if self.kind == "wrapped":
            return [im.as_value(state.fast.offset)]
        if self.kind == "offsets":
            return [im.as_value(o) for o in state.offsets]
        if self.kind == "gather":
            return [as_gather(state).offsets]
        return [state]          # "value" and "bytes": the value as it enters

    def types(self, ttir_type: ir.Type) -> list:
        """Types of the values this carry travels as (a plain value keeps its TTIR type)."""
        if self.kind in ("offset", "wrapped"):
            return [ir.IndexType.get()]
        if self.kind == "offsets":
            return [ir.IndexType.get()] * len(self.template.offsets)
        if self.kind == "gather":
            return [self.template.offsets.type]
        if self.kind == "bytes":
            return [bytes_type(ttir_type)]
        return [ttir_type]

    @property
    def width(self) -> int:
        return len(self.template.offsets) if self.kind == "offsets" else 1

    def rebuild(self, values: list):
        if self.kind == "offset":
            state = replace(self.template, offset=values[0])
            # the template's recipe computes the value entering the loop, not this one
            return replace(state, exact_value=None) if isinstance(state, st.AffineIndex) else state
        if self.kind == "offsets":
            return replace(self.template, offsets=tuple(values))
        if self.kind == "wrapped":
            return replace(self.template, fast=replace(self.template.fast, offset=values[0]))
        if self.kind == "gather":
            return replace(self.template, offsets=values[0])
        if self.kind == "bytes":
            return st.BoolBytes(values[0])
        return values[0]

    def compatible(self, state) -> bool:
        t = self.template
        if self.kind == "offset":
            return (type(state) is type(t) and state.shape == t.shape
                    and getattr(state, "base", None) == getattr(t, "base", None)
                    and all(im.same(a, b) for a, b in zip(state.strides, t.strides)))
        if self.kind == "offsets":
            return (isinstance(state, st.BlockPointer) and state.base == t.base
                    and state.block_shape == t.block_shape and im.same(state.base_offset, t.base_offset)
                    and all(im.same(a, b) for a, b in zip(state.shape + state.strides, t.shape + t.strides)))
        if self.kind == "wrapped":
            # the same condition and correction objects: only affine offsets were added in the loop
            return (isinstance(state, st.WrappedPointer) and state.holds == t.holds
                    and state.correction is t.correction and Carried("offset", t.fast).compatible(state.fast))
        if self.kind == "gather":
            base = state.fast.base if isinstance(state, st.WrappedPointer) else getattr(state, "base", None)
            return isinstance(state, (st.PointerState, st.GatherPointer, st.WrappedPointer)) and base == t.base
        return True


def as_gather(state) -> st.GatherPointer:
    return state if isinstance(state, st.GatherPointer) else materialize.gather_pointer(state)


def bytes_type(ty: ir.Type) -> ir.Type:
    return ir.RankedTensorType.get(list(ir.RankedTensorType(ty).shape), ir.IntegerType.get_signless(8))


def is_bool_tensor(ty: ir.Type) -> bool:
    return isinstance(ty, ir.RankedTensorType) and is_bool(ty)


def as_bytes(conv, value: ir.Value) -> ir.Value:
    """A boolean tensor's i8 bytes, without a round trip through i1 when it is held as bytes already."""
    state = conv.state(value)
    if isinstance(state, st.BoolBytes):
        return state.value
    return materialize.bytes_from_bool(conv.concrete(value))


def carry_for(conv, state, key, ttir_type) -> Carried:
    if is_bool_tensor(ttir_type):
        return Carried("bytes")
    if isinstance(state, st.BlockPointer):
        return Carried("offsets", state)
    if isinstance(state, (st.PointerState, st.AffineIndex)) and key not in conv.forced_gather:
        return Carried("offset", state)
    if isinstance(state, st.WrappedPointer) and key not in conv.forced_gather:
        return Carried("wrapped", state)
    if isinstance(state, (st.PointerState, st.GatherPointer, st.WrappedPointer)):
        return Carried("gather", as_gather(state))
    return Carried("value")


def _enter_loop(conv, operands, loop_id) -> tuple[list, list]:
    """The carry of each value entering a loop, and the flat list of values that enter."""
    carries, values = [], []
    for i, v in enumerate(operands):
        state = conv.state(v)
        carry = carry_for(conv, state, (loop_id, i), v.type)
        if carry.kind == "value":
            state = conv.concrete(v)
        elif carry.kind == "bytes":
            state = as_bytes(conv, v)
        carries.append(carry)
        values += carry.initial(state)
    return carries, values


def yielded_values(conv, carried: Carried, value: ir.Value, key) -> list:
    state = conv.state(value)
    if not carried.compatible(state):
        if carried.kind in ("offset", "wrapped"):
            raise RetryWithGather(key)
        raise conv.unsupported_use(value, "a loop-carried pointer whose base, shape or strides change")
    if carried.kind == "value":
        return [conv.concrete(value)]
    if carried.kind == "bytes":
        return [as_bytes(conv, value)]
    return carried.initial(state)


def _into_iter_arg(value: ir.Value, iter_arg: ir.Value) -> ir.Value:
    """Yield tensors through a copy into the iteration's own argument.

    Bufferization then reuses one buffer for the whole loop instead of returning a fresh allocation each
    iteration, whose ownership the upstream deallocation lowering can only track through i1 buffers
    that MLIR's LLVM lowering rejects."""
    if isinstance(value.type, ir.RankedTensorType) and value != iter_arg:
        return linalg.copy(value, outs=[iter_arg])
    return value


def _convert_body(conv, block: ir.Block):
    *body, terminator = list(block.operations)
    for inner in body:
        conv.convert_op(inner)
    return terminator


@handles("scf.for")
def convert_for(conv, op):
    conv.loop_counter += 1
    loop_id = conv.loop_counter
    lower, upper, step = (conv.concrete(v) for v in list(op.operands)[:3])
    carries, init_values = _enter_loop(conv, list(op.operands)[3:], loop_id)
    loop = scf.ForOp(lower, upper, step, init_values)
    if PARALLEL_LOOP in op.attributes:    # an smt.parallel loop (compiler/parallel_loops.py runs it)
        loop.operation.attributes[PARALLEL_LOOP] = ir.UnitAttr.get()
    old_block = op.regions[0].blocks[0]
    conv.bind(old_block.arguments[0], loop.induction_variable)
    for carry, old, new in zip(carries, list(old_block.arguments)[1:], split_carried(carries, loop.inner_iter_args)):
        conv.bind(old, carry.rebuild(new))
    with ir.InsertionPoint(loop.body):
        terminator = _convert_body(conv, old_block)
        yielded = []
        for i, (carry, value) in enumerate(zip(carries, terminator.operands)):
            yielded += yielded_values(conv, carry, value, (loop_id, i))
        scf.YieldOp([_into_iter_arg(v, arg) for v, arg in zip(yielded, loop.inner_iter_args)])
    for carry, old, new in zip(carries, op.results, split_carried(carries, loop.results)):
        conv.bind(old, carry.rebuild(new))


def split_carried(carries, values) -> list:
    """Regroup a flat list of loop values by carried value."""
    values, groups, at = list(values), [], 0
    for carry in carries:
        groups.append(values[at:at + carry.width])
        at += carry.width
    return groups


@dataclass
class IfResult:
    """How one result of an scf.if leaves its branches: "value", "bytes" (a boolean tensor), "offset" (a
    pointer whose base, shape and strides both branches keep: its offset alone), "gather" (a pointer
    whose strides differ between the branches: its offsets tensor) or "address" (pointers of one shape
    and strides into different arguments, as FlagGems' cat picks its input per program: the i64 address
    of the first element). The result types are fixed before the branches are converted: a pointer starts
    as "offset" and the conversion restarts with it as a gather or an address when the else branch
    disagrees with the then branch (RetryWithGather). Both arguments of an address count as written: a
    store through it cannot tell which one it is."""
    kind: str
    key: object
    template: object = None       # the then branch's pointer state

    @staticmethod
    def of(conv, ttir_type: ir.Type, key) -> "IfResult":
        if is_bool_tensor(ttir_type):
            return IfResult("bytes", key)
        if is_pointer(ttir_type):
            if (key, "address") in conv.forced_gather:
                return IfResult("address", key)
            return IfResult("gather" if key in conv.forced_gather else "offset", key)
        return IfResult("value", key)

    def type(self, ttir_type: ir.Type) -> ir.Type:
        if self.kind == "bytes":
            return bytes_type(ttir_type)
        if self.kind == "offset":
            return ir.IndexType.get()
        if self.kind == "address":
            return ir.IntegerType.get_signless(64)
        if self.kind == "gather":
            shape = list(ir.RankedTensorType(ttir_type).shape) if isinstance(ttir_type, ir.RankedTensorType) else []
            return ir.RankedTensorType.get(shape, ir.IntegerType.get_signless(64))
        return ttir_type

    def yielded(self, conv, value: ir.Value) -> ir.Value:
        if self.kind == "bytes":
            return as_bytes(conv, value)
        if self.kind == "value":
            return conv.concrete(value)
        state = conv.state(value)
        if isinstance(state, st.WrappedPointer):
            state = as_gather(state)      # its exact addresses: the branches' conditions may differ
        if not isinstance(state, (st.PointerState, st.GatherPointer)):
            raise conv.unsupported_use(value, "an if that yields a block pointer")
        if self.template is None:
            self.template = state
        if self.kind == "address":
            if not st.same_layout(self.template, state):
                raise conv.unsupported_use(value, "an if whose branches yield pointers of different shapes "
                                                  "or strides into different arguments")
            conv.written_args.update(conv.argument_of[p.base] for p in (self.template, state)
                                     if p.base in conv.argument_of)
            return address_of(state)
        if self.kind == "offset":
            if not Carried("offset", self.template).compatible(state):
                if state.base != self.template.base and st.same_layout(self.template, state):
                    raise RetryWithGather((self.key, "address"))
                raise RetryWithGather(self.key)
            return im.as_value(state.offset)
        if state.base != self.template.base:
            raise conv.unsupported_use(value, "an if whose branches yield pointers into different arguments")
        return as_gather(state).offsets

    def rebuild(self, value: ir.Value):
        if self.kind == "bytes":
            return st.BoolBytes(value)
        if self.kind == "offset":
            return replace(self.template, offset=value)
        if self.kind == "address":
            return pointer_at(value, self.template)
        if self.kind == "gather":
            return st.GatherPointer(self.template.base, self.template.element_type, self.template.shape, value)
        return value


@handles("scf.if")
def convert_if(conv, op):
    cond = conv.concrete(op.operands[0])
    if not len(op.results):
        branch = scf.IfOp(cond, [], has_else=len(op.regions[1].blocks) > 0)
        for region, block in ((op.regions[0], branch.then_block),
                              (op.regions[1], branch.else_block if len(op.regions[1].blocks) else None)):
            if block is None:
                continue
            with ir.InsertionPoint(block):
                _convert_body(conv, region.blocks[0])
                scf.YieldOp([])
        return
    conv.loop_counter += 1
    results = [IfResult.of(conv, r.type, (conv.loop_counter, "if", i)) for i, r in enumerate(op.results)]
    branch = scf.IfOp(cond, [res.type(r.type) for res, r in zip(results, op.results)], has_else=True)
    for region, block in ((op.regions[0], branch.then_block), (op.regions[1], branch.else_block)):
        with ir.InsertionPoint(block):
            terminator = _convert_body(conv, region.blocks[0])
            scf.YieldOp([res.yielded(conv, v) for res, v in zip(results, terminator.operands)])
    for res, old, new in zip(results, op.results, branch.results):
        conv.bind(old, res.rebuild(new))


@handles("scf.while")
def convert_while(conv, op):
    """scf.while: values enter the `before` region (carried like loop values), the condition forwards
    values to the `after` region and the results. Forwarded values keep the carry of the loop value at the
    same position when their structure matches it, else travel as plain values or gathers."""
    conv.loop_counter += 1
    loop_id = conv.loop_counter
    before_block, after_block = op.regions[0].blocks[0], op.regions[1].blocks[0]
    carries, init_values = _enter_loop(conv, list(op.operands), loop_id)

    forwarded = _forwarded_carries(conv, op, carries, loop_id)
    result_types = [t for carry, r in zip(forwarded, op.results) for t in carry.types(r.type)]
    loop = scf.WhileOp(result_types, init_values)
    before = loop.before.blocks.append(*[v.type for v in init_values])
    after = loop.after.blocks.append(*result_types)
    for carry, old, new in zip(carries, before_block.arguments, split_carried(carries, before.arguments)):
        conv.bind(old, carry.rebuild(new))
    with ir.InsertionPoint(before):
        condition = _convert_body(conv, before_block)
        passed = []
        for i, (carry, value) in enumerate(zip(forwarded, list(condition.operands)[1:])):
            passed += yielded_values(conv, carry, value, (loop_id, ("forwarded", i)))
        scf.ConditionOp(conv.concrete(condition.operands[0]), passed)
    for carry, old, new in zip(forwarded, after_block.arguments, split_carried(forwarded, after.arguments)):
        conv.bind(old, carry.rebuild(new))
    with ir.InsertionPoint(after):
        terminator = _convert_body(conv, after_block)
        yielded = []
        for i, (carry, value) in enumerate(zip(carries, terminator.operands)):
            yielded += yielded_values(conv, carry, value, (loop_id, i))
        scf.YieldOp(yielded)
    for carry, old, new in zip(forwarded, op.results, split_carried(forwarded, loop.results)):
        conv.bind(old, carry.rebuild(new))


def _forwarded_carries(conv, op, carries, loop_id) -> list:
    """Carries of the values scf.condition forwards: the loop value's carry at the same position when
    the structure matches (the common `while` shape), otherwise as plain values or gathers."""
    out = []
    for i, result in enumerate(op.results):
        carry = carries[i] if i < len(carries) else None
        if carry is not None and carry.kind in ("offset", "offsets", "gather") and \
                (loop_id, ("forwarded", i)) not in conv.forced_gather:
            out.append(carry)
        elif is_bool_tensor(result.type):
            out.append(Carried("bytes"))
        elif is_pointer(result.type):
            if carry is None or carry.kind == "value":
                raise conv.unsupported(op, "a while loop forwarding a pointer it does not carry")
            out.append(Carried("gather", as_gather(carry.template)))
        else:
            out.append(Carried("value"))
    return out

