"""Unstructured control flow: regions of several blocks joined by cf.br / cf.cond_br, converted block by
block, then lifted into scf by upstream MLIR's lift-cf-to-scf.

Where TTIR branches: triton's frontend turns an `if` that contains a `return` (at the top level of a kernel
or device function; one inside a loop is rejected) into cf.cond_br between blocks, the code after the `if`
into a block whose arguments are the variables the branches assign:

    ^bb0:  cf.cond_br %c, ^bb1, ^bb2
    ^bb1:  tt.return                                  // if c: return
    ^bb2:  ... cf.br ^bb3(%v)                         // else: v = ...
    ^bb3(%x: i32):  tt.store %out, %x ...

A device function of several blocks that is called inside a loop or an if reaches the conversion as an
scf.execute_region holding its blocks (calls.py). The conversion is the same for both, and for any CFG:

1. Blocks are visited in reverse post-order from the entry, so every block comes after its dominators and
   every value it uses is converted already. Each gets a twin block in the converted region.
2. Block arguments travel like loop-carried values (control_flow.Carried): a pointer whose base, shape and
   strides agree on every incoming edge as its offset alone (strided accesses stay strided), otherwise as a
   gather; a boolean tensor as its bytes. A block's carries are chosen when it is reached, from its forward
   edges, which are all converted by then. A back edge (a cycle: triton emits none) that disagrees
   restarts the conversion with that argument carried as a gather (RetryWithGather), as loops do.
3. A branch is emitted once the carries of all its successors are known: the values it passes are
   materialised at the end of its block.
4. Once the function is complete, lift-cf-to-scf turns every such region into scf.if / scf.while /
   scf.index_switch with a flag per exit (an early return becomes "skip the rest"). The poison tensors it
   creates for values undefined on some paths become tensor.empty: bufferization has no poison tensor.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from mlir import ir
from mlir.dialects import cf, scf, tensor

from ..errors import SpineCompilationError
from . import states as st
from .control_flow import Carried, as_bytes, as_gather, bytes_type, carry_for, is_bool_tensor, yielded_values
from .converter import handles
from .types import is_pointer

BRANCHES = ("cf.br", "cf.cond_br")


def reverse_post_order(entry: ir.Block) -> list:
    """Blocks reachable from `entry`, each after all of its dominators."""
    order, seen, stack = [], {entry}, [(entry, iter(_successors(entry)))]
    while stack:
        block, successors = stack[-1]
        for successor in successors:
            if successor not in seen:
                seen.add(successor)
                stack.append((successor, iter(_successors(successor))))
                break
        else:
            stack.pop()
            order.append(block)
    return order[::-1]


def _successors(block: ir.Block) -> list:
    return list(_terminator(block).successors)


def _terminator(block: ir.Block):
    return list(block.operations)[-1]


def _edges(op) -> list:
    """(successor, the TTIR values passed to it) of a branch."""
    successors = list(op.successors)
    operands = list(op.operands)
    if op.operation.name == "cf.br":
        return [(successors[0], operands)]
    true_count = len(successors[0].arguments)
    return [(successors[0], operands[1:1 + true_count]), (successors[1], operands[1 + true_count:])]


@dataclass
class _PendingBranch:
    twin: ir.Block            # the converted block the branch ends
    op: object                # the TTIR branch
    condition: object         # cf.cond_br's condition, converted; None for cf.br


@dataclass
class RegionWalk:
    """The conversion of one region of several blocks into `twins[entry]`'s region."""
    conv: object
    region_id: int
    terminate: object                                  # converts a non-branch terminator (return, yield)
    twins: dict = field(default_factory=dict)          # TTIR block → converted block
    carries: dict = field(default_factory=dict)        # TTIR block → Carried per argument
    incoming: dict = field(default_factory=dict)       # TTIR block → [(twin of the edge's source, TTIR
                                                       # values it passes)] per converted edge
    pending: list = field(default_factory=list)
    index: dict = field(default_factory=dict)          # TTIR block → its position (stable retry keys)

    def run(self, region: ir.Region, entry_twin: ir.Block) -> None:
        blocks = list(region.blocks)
        self.index = {block: i for i, block in enumerate(blocks)}
        order = reverse_post_order(blocks[0])
        self.twins[order[0]] = entry_twin
        self.carries[order[0]] = []               # the entry's arguments are bound by the region's owner
        for block in order[1:]:
            self.twins[block] = entry_twin.region.blocks.append()
        for block in order:
            self._convert_block(block)
        if self.pending:
            raise SpineCompilationError(f"internal: unresolved branches in '{self.conv.kernel_name}'")

    def _key(self, block, position):
        return (self.region_id, "block", self.index[block], position)

    def _convert_block(self, block: ir.Block) -> None:
        twin = self.twins[block]
        if block not in self.carries:
            self._open(block, twin)
        *body, terminator = list(block.operations)
        with ir.InsertionPoint(twin):
            for op in body:
                self.conv.convert_op(op)
            with terminator.location:
                if terminator.operation.name in BRANCHES:
                    self._branch(block, twin, terminator)
                else:
                    self.terminate(self.conv, terminator)
        self._emit_ready()

    def _open(self, block: ir.Block, twin: ir.Block) -> None:
        """Choose the carries of the block's arguments from the edges converted so far, and bind them."""
        edges = self.incoming.get(block, [])
        carries = []
        for position, argument in enumerate(block.arguments):
            states = [self.conv.state(values[position]) for _, values in edges]
            carries.append(self._carry(block, position, argument, states, edges[0][0]))
        self.carries[block] = carries
        for carry, argument in zip(carries, block.arguments):
            values = [twin.add_argument(t, argument.location) for t in carry.types(argument.type)]
            self.conv.bind(argument, carry.rebuild(values))

    def _carry(self, block, position, argument, states, first_source: ir.Block) -> Carried:
        key = self._key(block, position)
        with ir.InsertionPoint(first_source):      # its branch is not emitted yet
            carry = carry_for(self.conv, states[0], key, argument.type)
        if all(carry.compatible(s) for s in states[1:]):
            return carry
        if not is_pointer(argument.type):          # index tensors of different structure
            return Carried("value")
        if all(isinstance(s, (st.PointerState, st.GatherPointer)) and s.base == states[0].base for s in states):
            # The template is materialised where the first edge leaves from (its branch is not emitted
            # yet); each edge passes its own offsets.
            with ir.InsertionPoint(first_source):
                return Carried("gather", as_gather(states[0]))
        raise self.conv.unsupported_use(argument, "a block argument whose pointer base differs between "
                                                  "the branches that reach it")

    def _branch(self, block, twin, op) -> None:
        condition = self.conv.concrete(op.operands[0]) if op.operation.name == "cf.cond_br" else None
        for successor, values in _edges(op):
            self.incoming.setdefault(successor, []).append((twin, values))
        self.pending.append(_PendingBranch(twin, op, condition))

    def _emit_ready(self) -> None:
        """Emit every pending branch whose successors all have their carries."""
        still = []
        for branch in self.pending:
            edges = _edges(branch.op)
            if not all(successor in self.carries for successor, _ in edges):
                still.append(branch)
                continue
            with ir.InsertionPoint(branch.twin), branch.op.location:
                passed = [self._passed(successor, values) for successor, values in edges]
                targets = [self.twins[successor] for successor, _ in edges]
                if branch.condition is None:
                    cf.BranchOp(passed[0], targets[0])
                else:
                    cf.CondBranchOp(branch.condition, passed[0], passed[1], targets[0], targets[1])
        self.pending = still

    def _passed(self, successor, values) -> list:
        out = []
        for position, (carry, value) in enumerate(zip(self.carries[successor], values)):
            out += yielded_values(self.conv, carry, value, self._key(successor, position))
        return out


def convert_region(conv, region: ir.Region, entry_twin: ir.Block, terminate) -> None:
    """Convert a region into the region of `entry_twin` (whose arguments the caller bound): in place when it
    has one block, as a CFG of twin blocks otherwise. `terminate(conv, op)` converts its returns/yields."""
    blocks = list(region.blocks)
    if len(blocks) == 1:
        *body, terminator = list(blocks[0].operations)
        with ir.InsertionPoint(entry_twin):
            for op in body:
                conv.convert_op(op)
            with terminator.location:
                terminate(conv, terminator)
        return
    conv.loop_counter += 1
    RegionWalk(conv, conv.loop_counter, terminate).run(region, entry_twin)


# ------------------------------------------------------------------------------ scf.execute_region

def _yield_type(ty: ir.Type) -> ir.Type:
    return bytes_type(ty) if is_bool_tensor(ty) else ty


@handles("scf.execute_region")
def convert_execute_region(conv, op):
    if any(is_pointer(r.type) for r in op.results):
        raise conv.unsupported(op, "a device function with several blocks that returns a pointer")
    region_op = scf.ExecuteRegionOp([_yield_type(r.type) for r in op.results])
    entry = region_op.regions[0].blocks.append()

    def terminate(conv, terminator):
        if terminator.operation.name != "scf.yield":
            raise conv.unsupported(terminator, "inside a device function")
        scf.YieldOp([as_bytes(conv, v) if is_bool_tensor(v.type) else conv.concrete(v)
                     for v in terminator.operands])
    convert_region(conv, op.regions[0], entry, terminate)
    for old, new in zip(op.results, region_op.results):
        conv.bind(old, st.BoolBytes(new) if is_bool_tensor(old.type) else new)


# ----------------------------------------------------------------------------------- lifting to scf

def has_unstructured_regions(op) -> bool:
    found = []

    def visit(inner):
        if any(len(list(region.blocks)) > 1 for region in inner.regions):
            found.append(inner)
            return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE
    op.walk(visit)
    return bool(found)


def lift_to_scf(fn) -> None:
    """Run lift-cf-to-scf on a converted function whose regions branch; a no-op for structured ones."""
    if not has_unstructured_regions(fn.operation):
        return
    from mlir import passmanager
    try:
        passmanager.PassManager.parse("func.func(lift-cf-to-scf)").run(fn.operation)
    except ir.MLIRError as err:
        raise SpineCompilationError(f"control flow of kernel '{ir.StringAttr(fn.attributes['sym_name']).value}' "
                                    f"could not be made structured: {err}") from None
    _poison_tensors_to_empty(fn)


def _poison_tensors_to_empty(fn) -> None:
    poisons = []

    def visit(op):
        if op.operation.name == "ub.poison" and isinstance(op.results[0].type, ir.RankedTensorType):
            poisons.append(op.operation)
        return ir.WalkResult.ADVANCE
    fn.operation.walk(visit)
    for op in poisons:
        ty = ir.RankedTensorType(op.results[0].type)
        with ir.InsertionPoint(op), op.location:
            empty = tensor.EmptyOp(list(ty.shape), ty.element_type).result
        op.results[0].replace_all_uses_with(empty)
        op.erase()
