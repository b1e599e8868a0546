"""The TTIR → linalg converter: walks the kernel in order and dispatches each op to its handler.

Handlers live one family per module (load.py handles `tt.load`, reduce.py `tt.reduce`, ...) and register
with `@handles(...)`. Each maps the op's results to states (states.py) or concrete MLIR values; the
converter materialises states on demand. Ops from upstream dialects (arith, math) that need no rewriting
are cloned with their operands remapped.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict

from mlir import ir

from ..errors import SpineCompilationError, describe_location
from . import materialize
from .states import BoolBytes, GatherPointer, PointerState, WrappedPointer
from .types import is_bool

HANDLERS: Dict[str, Callable] = {}
# The ops whose handlers take a WrappedPointer operand as it is (wraparound.py); any other gets its exact
# addresses as a gather
WRAP_AWARE = frozenset({"tt.addptr", "tt.load", "tt.store", "tt.expand_dims", "tt.broadcast", "scf.for",
                        "scf.if", "scf.yield"})
# dialect prefix ("arith.") → the handler of every op of that dialect without a handler of its own
DIALECT_HANDLERS: Dict[str, Callable] = {}


def handles(*names: str):
    def register(fn):
        for name in names:
            HANDLERS[name] = fn
        return fn
    return register


def handles_dialects(*prefixes: str):
    def register(fn):
        for prefix in prefixes:
            DIALECT_HANDLERS[prefix] = fn
        return fn
    return register


class RetryWithGather(Exception):
    """A loop-carried pointer changed its strides inside the loop: convert again, carrying it as a gather."""

    def __init__(self, key):
        super().__init__(key)
        self.key = key


@dataclass
class Converter:
    kernel_name: str
    values: dict = field(default_factory=dict)
    # kernel-argument memrefs → their index among the kernel's runtime arguments
    argument_of: dict = field(default_factory=dict)
    written_args: set = field(default_factory=set)
    integer_addresses: bool = False     # a pointer made from an integer is dereferenced (pointers.py)
    address_args: set = field(default_factory=set)   # where those integers come from (address_origins.py)
    matrix_units: set = field(default_factory=set)   # the matrix-unit kernels products ran on (smt_dot.py)
    program_ids: list = field(default_factory=list)      # pid x, y, z then num_programs x, y, z
    forced_gather: frozenset = frozenset()
    loop_counter: int = 0                                 # numbers scf.for ops, stable across retries
    entry_block: object = None
    # (argument index, element type) → extra memref argument viewing that argument as that type
    argument_views: dict = field(default_factory=dict)
    module: object = None                                 # the module being built
    declared: dict = field(default_factory=dict)
    strings: dict = field(default_factory=dict)           # constant strings → their memref.global
    direct_load_args: frozenset = frozenset()             # arguments whose loads read memory in place
    bounds: object = None                                 # bounds.BoundsCheck when accesses are checked
    microkernel: object = None                            # the target's packed-matmul MicroKernel, if any
    prefetch_next_program: bool = False                   # the target gains from it (prefetch.py)
    fp_fusion: bool = True                                # products may fuse into their sums (reduce.py)
    # reduce.py: a half-precision sum rounded from its fp32 total → that total, for an extf back to fp32
    wide_sums: dict = field(default_factory=dict)
    buffer_uses: int = 0                                  # to_buffer ops smt_dot.py has numbered so far
    b_panels: dict = field(default_factory=dict)          # smt_dot.py: (B, panels spec) → B packed before a loop
    # load.py: a loaded 2-D tile (TTIR value) → the row its zero padding starts at (an index value)
    zero_padded_rows: dict = field(default_factory=dict)
    # load.py: those of them read in place, whose rows from there on are the matrix's next ones (or past
    # its end): a packed matmul that reads A's rows only below the bound may take them so
    rows_read_in_place: set = field(default_factory=set)

    # -------------------------------------------------------------------------------------- value map
    def state(self, value: ir.Value):
        try:
            return self.values[value]
        except KeyError:
            raise SpineCompilationError(f"internal: value used before it was converted in '{self.kernel_name}'")

    def concrete(self, value: ir.Value) -> ir.Value:
        """The concrete value, materialising (and remembering) a symbolic state."""
        state = self.state(value)
        if isinstance(state, (PointerState, GatherPointer, WrappedPointer)):
            raise self.unsupported_use(value, "a pointer used as a plain value")
        if isinstance(state, BoolBytes):
            return materialize.bool_from_bytes(state.value)
        if not isinstance(state, ir.Value):
            # Not memoised: each use gets its own single-use producer, which the elementwise fusion then
            # folds into the consumer (a shared producer would be bufferized into a temporary instead).
            state = materialize.concrete(state)
        return state

    def bind(self, result: ir.Value, state) -> None:
        self.values[result] = state

    # ----------------------------------------------------------------------------------------- walking
    def convert_block(self, block: ir.Block) -> None:
        for op in block.operations:
            self.convert_op(op)

    def convert_op(self, op) -> None:
        name = op.operation.name
        handler = HANDLERS.get(name)
        with op.location:
            if handler is None:
                handler = DIALECT_HANDLERS.get(name.split(".", 1)[0] + ".")
            if handler is None:
                raise self.unsupported(op)
            exact = {} if name in WRAP_AWARE else self._exact_pointers(op)
            try:
                handler(self, op)
            except (SpineCompilationError, RetryWithGather, ir.MLIRError):
                raise
            except (TypeError, ValueError, KeyError, IndexError, AttributeError, NotImplementedError) as err:
                # A case a handler does not expect must still name the op and the kernel's source line.
                raise self.unsupported(op, f"{type(err).__name__}: {err}") from err
            finally:
                self.values.update(exact)

    def _exact_pointers(self, op) -> dict:
        """For an op that does not know WrappedPointer (wraparound.py): its wrapped pointer operands bound
        to their exact addresses, a gather made here, for this op alone. Returns what to bind back."""
        saved = {}
        for value in op.operands:
            state = self.values.get(value)
            if isinstance(state, WrappedPointer) and value not in saved:
                saved[value] = state
                self.values[value] = materialize.gather_pointer(state)
        return saved

    def clone(self, op) -> None:
        """Clone an upstream op at the insertion point with its operands made concrete (boolean tensors
        are kept as BoolBytes)."""
        operands = [self.concrete(v) for v in op.operands]
        new = op.operation.clone()
        for i, v in enumerate(operands):
            new.operands[i] = v
        for old, res in zip(op.results, new.results):
            if isinstance(res.type, ir.RankedTensorType) and is_bool(res.type):
                self.bind(old, BoolBytes(materialize.bytes_from_bool(res)))
            else:
                self.bind(old, res)

    def declare(self, name: str, inputs, results) -> str:
        """A private function declaration at the top of the module (once per name)."""
        if name not in self.declared:
            from mlir.dialects import func
            with ir.InsertionPoint.at_block_begin(self.module.body), ir.Location.unknown():
                decl = func.FuncOp(name, ir.FunctionType.get(list(inputs), list(results)), visibility="private")
            self.declared[name] = decl
        return name

    def call(self, symbol: str, args: list, results=()) -> list:
        """A call of a function outside the kernel (the runtime's, the C library's, an LLVM intrinsic by
        name), declared on first use with the arguments' types; its results."""
        from mlir.dialects import func
        self.declare(symbol, [a.type for a in args], list(results))
        return list(func.CallOp(list(results), ir.FlatSymbolRefAttr.get(symbol), list(args)).results)

    # ------------------------------------------------------------------------------------------ errors
    def unsupported(self, op, detail: str = "") -> SpineCompilationError:
        what = f"unsupported operation '{op.operation.name}'"
        if detail:
            what += f" ({detail})"
        return SpineCompilationError(
            f"{what} in kernel '{self.kernel_name}' at {describe_location(op.location)}")

    def unsupported_use(self, value: ir.Value, detail: str) -> SpineCompilationError:
        owner = value.owner
        loc = owner.location if hasattr(owner, "location") else None
        where = describe_location(loc) if loc is not None else "an unknown source line"
        return SpineCompilationError(f"unsupported: {detail} in kernel '{self.kernel_name}' at {where}")

