"""Random kernels: the hypothesis strategy for a whole program (tile layout, leaves, expression, sink) and the
Python source of its `@triton.jit` kernel.

Every kernel has one shape:

    pid0 = tl.program_id(0); r0 = pid0 * BLOCK0 + tl.arange(0, BLOCK0)      (and axis 1 for 2-D tiles)
    mask = (r0[:, None] < size0) & (r1[None, :] < size1)
    <leaves: masked loads with `other`, rows/columns broadcast with [:, None] / [None, :], scalars, indices>
    <the expression, one statement per node, each followed by tl.static_assert(v.dtype == ...)>
    tl.store(out + ..., tl.broadcast_to(root, (BLOCK0, BLOCK1)), mask=mask)     or an atomic into a few slots
    (tl.store(out2 + ..., <the same value>, mask=mask)                          a second output, if any)

Sizes are never multiples of the blocks and the grid may have a program past the end, so masks matter.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional, Tuple

from hypothesis import strategies as st

from . import dtypes as D
from . import tree as T
from .dtypes import DType
from .tree import Leaf, Node

KERNEL_NAME = "fuzz_kernel"


@dataclass(frozen=True)
class Layout:
    blocks: Tuple[int, ...]      # (BLOCK0,) or (BLOCK0, BLOCK1)
    sizes: Tuple[int, ...]       # elements along each axis (masked beyond)
    grid: Tuple[int, ...]        # programs along each axis

    @property
    def rank(self) -> int:
        return len(self.blocks)

    def shape_source(self, shape) -> str:
        dims = [f"BLOCK{d}" if shape is not None and shape[d] else "1" for d in range(self.rank)]
        return "(" + ", ".join(dims) + ("," if self.rank == 1 else "") + ")"

    def tile_offsets(self, stride: str) -> str:
        """Element offsets of this program's tile in a row-major (size0, size1) array with row `stride`."""
        if self.rank == 1:
            return "r0"
        return f"r0[:, None] * {stride} + r1[None, :]"


# ------------------------------------------------------------------------------------------ leaf specs
# Each leaf kind knows its kernel arguments, the source line that defines it, and (in runner.py) its data.

@dataclass(eq=False)
class TensorInput:
    """A masked load: `kind` is "tile", "block" (the tile through tl.make_block_ptr with boundary checks;
    `other` is its padding, 0 or NaN), "vec0"/"vec1" (a vector along one axis, broadcast along the
    other), "scalar" (element 0) or "per_program" (element pid0)."""
    arg: str
    dtype: DType
    kind: str
    other: object              # literal for masked lanes, or None (then those lanes are undefined)
    rank: int = 1
    pad: int = 0               # extra elements per row of a 2-D tile (row stride = size1 + pad)
    in_loop: bool = False      # a loop input: `slices` tiles, one per iteration
    slices: int = 0

    def arguments(self) -> List[str]:
        args = [self.arg]
        if self.kind in ("tile", "block") and self.rank == 2:
            args.append(f"stride_{self.arg}")
        if self.in_loop:
            args.append(f"slice_{self.arg}")
        return args

    def load(self, layout: Layout, pointer: Optional[str] = None) -> str:
        other = "" if self.other is None else f", other={literal(self.other)}"
        if self.kind == "scalar":
            return f"tl.load({self.arg})"
        if self.kind == "per_program":
            return f"tl.load({self.arg} + pid0)"
        if self.kind == "vec0":
            text = f"tl.load({self.arg} + r0, mask=r0 < size0{other})"
            return text + ("[:, None]" if layout.rank == 2 else "")
        if self.kind == "vec1":
            return f"tl.load({self.arg} + r1, mask=r1 < size1{other})[None, :]"
        if self.kind == "block":
            return self.block_load(layout)
        address = pointer or f"{self.arg} + {layout.tile_offsets(f'stride_{self.arg}')}"
        return f"tl.load({address}, mask=mask{other})"


    def block_load(self, layout: Layout) -> str:
        dims = range(layout.rank)
        shape = ", ".join(f"size{d}" for d in dims)
        strides = f"stride_{self.arg}, 1" if layout.rank == 2 else "1"
        offsets = ", ".join(f"pid{d} * BLOCK{d}" for d in dims)
        block = ", ".join(f"BLOCK{d}" for d in dims)
        order = "1, 0" if layout.rank == 2 else "0"
        comma = "," if layout.rank == 1 else ""
        padding = "nan" if self.other is not None and self.other != self.other else "zero"
        return (f"tl.load(tl.make_block_ptr({self.arg}, shape=({shape}{comma}), strides=({strides}{comma}), "
                f"offsets=({offsets}{comma}), block_shape=({block}{comma}), order=({order}{comma})), "
                f"boundary_check=({', '.join(str(d) for d in dims)}{comma}), padding_option=\"{padding}\")")


def literal(value) -> str:
    if isinstance(value, float) and value != value:
        return 'float("nan")'
    if isinstance(value, float) and abs(value) == float("inf"):
        return f'{"-" if value < 0 else ""}float("inf")'
    return repr(value)


@dataclass(eq=False)
class Builtin:
    """Leaves computed from the program id: "r0", "r1" (offsets), "pid0", "mask"."""
    kind: str

    def arguments(self) -> List[str]:
        return []

    def load(self, layout: Layout, pointer=None) -> str:
        if self.kind == "r0":
            return "r0[:, None]" if layout.rank == 2 else "r0"
        if self.kind == "r1":
            return "r1[None, :]"
        return self.kind


@dataclass(eq=False)
class ScalarArg:
    """A runtime scalar argument (never specialised, so its dtype is fixed: int32, int64 or fp32)."""
    arg: str
    dtype: DType
    value: object

    def arguments(self) -> List[str]:
        return [self.arg]

    def load(self, layout: Layout, pointer=None) -> str:
        return self.arg


@dataclass(eq=False)
class LoopValue:
    """The accumulator and the induction variable of a loop: defined by the loop itself."""
    kind: str

    def arguments(self) -> List[str]:
        return []


@dataclass(frozen=True)
class Sink:
    kind: str                    # "store" or "atomic_add" / "atomic_max" / "atomic_min"
    dtype: DType                 # what is stored (the root cast to it)
    slots: int = 0               # atomics: the output has this many elements, indexed by offset % slots
    pointer_as: Optional[DType] = None   # atomics through the output pointer cast to an unsigned type
    extra_mask: Optional[Node] = None    # atomics: a computed mask and-ed with the tile mask


@dataclass(frozen=True)
class Program:
    layout: Layout
    root: Node                   # already of the sink's dtype and broadcast to the whole tile
    sink: Sink
    data_seed: int
    outputs: int = 1             # stores: 2 adds `out2`, stored the same value as `out`

    @property
    def output_names(self) -> List[str]:
        return ["out", "out2"][:self.outputs]

    def leaves(self) -> List[Leaf]:
        return [n for n in self.leaves_and_nodes() if isinstance(n, Leaf)]

    def loop_leaves(self) -> set:
        """Leaves a loop defines (accumulator, index, per-iteration loads) or its trip count argument."""
        out = set()
        for loop in (n for n in self.leaves_and_nodes() if isinstance(n, T.Loop)):
            out |= {id(leaf) for leaf in [loop.acc, loop.index, loop.trips] + loop.loads}
        return out

    def leaves_and_nodes(self) -> list:
        roots = [self.root] + ([self.sink.extra_mask] if self.sink.extra_mask is not None else [])
        seen: set = set()
        return [n for r in roots for n in T.walk(r, seen)]

    def inputs(self) -> list:
        """Specs with kernel arguments, in signature order (first use)."""
        specs = []
        for leaf in self.leaves():
            if leaf.spec not in specs and leaf.spec.arguments():
                specs.append(leaf.spec)
        return specs


# ------------------------------------------------------------------------------------------ strategies

@st.composite
def layouts(draw, small: bool) -> Layout:
    rank = draw(st.sampled_from([1, 2]))
    block_choices = [1, 2, 4, 8] if small else [1, 2, 4, 8, 16, 32]
    blocks = tuple(draw(st.sampled_from(block_choices)) for _ in range(rank))
    if rank == 2 and not small and draw(st.integers(0, 3)) == 0:
        blocks = (draw(st.sampled_from([16, 32])),) * 2          # square tiles large enough for tl.dot
    sizes = tuple(draw(st.integers(1, 2 * b + 1)) for b in blocks)
    grid = tuple(-(-n // b) + draw(st.sampled_from([0, 0, 1])) for n, b in zip(sizes, blocks))
    return Layout(blocks, sizes, grid)


def literal_other(draw, dt: DType):
    if dt == D.BOOL:
        return draw(st.sampled_from([None, True, False]))
    if dt.is_float:
        return draw(st.sampled_from([None, 0.0, 1.0, -2.5, float("inf"), float("nan")]))
    values = [None, 0, 1, 7] + ([-1, -100] if dt.signed else [200 if dt.bits == 8 else 1000])
    return draw(st.sampled_from(values))


@st.composite
def tensor_inputs(draw, layout: Layout, index: int, kinds=None) -> TensorInput:
    kinds = kinds or (["tile", "tile", "block", "vec0", "scalar", "per_program"] +
                      (["vec1"] if layout.rank == 2 else []))
    kind = draw(st.sampled_from(kinds))
    # (a block pointer to bool loads int8 in triton's frontend: no bool blocks)
    dt = draw(st.sampled_from([d for d in D.STORABLE if kind != "block" or d != D.BOOL]))
    if kind == "block":     # padding is zero, or NaN for floats
        other = draw(st.sampled_from([0.0, float("nan")])) if dt.is_float else 0
    else:
        other = literal_other(draw, dt)
    return TensorInput(f"in{index}", dt, kind, other, rank=layout.rank, pad=draw(st.sampled_from([0, 0, 3])))


def leaf_for(spec, layout: Layout, name: str) -> Leaf:
    full = (True,) * layout.rank
    if isinstance(spec, TensorInput):
        shape = {"tile": full, "block": full, "scalar": None, "per_program": None,
                 "vec0": (True,) + (False,) * (layout.rank - 1), "vec1": (False, True)}[spec.kind]
        return Leaf(spec.dtype, shape, name=name, spec=spec)
    if isinstance(spec, ScalarArg):
        return Leaf(spec.dtype, None, name=name, spec=spec)
    shapes = {"r0": (True,) + (False,) * (layout.rank - 1), "r1": (False, True), "pid0": None, "mask": full}
    return Leaf(D.BOOL if spec.kind == "mask" else D.I32, shapes[spec.kind], name=name, spec=spec)


@st.composite
def leaf_pool(draw, layout: Layout) -> List[Leaf]:
    count = draw(st.integers(1, 4))
    leaves = [leaf_for(draw(tensor_inputs(layout, i)), layout, f"x{i}") for i in range(count)]
    builtins = ["r0", "pid0", "mask"] + (["r1"] if layout.rank == 2 else [])
    leaves += [leaf_for(Builtin(kind), layout, f"b_{kind}") for kind in builtins]
    int_value = draw(st.sampled_from([0, 3, -7, 1000, 2 ** 31 - 1, -2 ** 31, 2 ** 40 + 5]))
    int_dt = D.I32 if -2 ** 31 <= int_value < 2 ** 31 else D.I64
    leaves.append(leaf_for(ScalarArg("sa_int", int_dt, int_value), layout, "s_int"))
    leaves.append(leaf_for(ScalarArg("sa_float", D.F32, draw(st.sampled_from([0.5, -3.25, 1e-3, 6e4]))),
                           layout, "s_float"))
    return leaves


def to_dtype(gen: T.Gen, x: Node, dt: DType) -> Node:
    """x converted to dt without undefined behaviour."""
    if x.dtype.is_float and dt.is_int and dt != D.BOOL:
        return T.float_to_int(x, dt)
    return T.cast(x, dt)


class LoopMaker:
    """Builds the loop node for Gen (tree.py): its leaves are fresh per loop."""

    def __init__(self, layout: Layout):
        self.layout = layout
        self.count = 0

    def __call__(self, gen: T.Gen, depth: int) -> T.Loop:
        self.count += 1
        n, full = self.count, (True,) * self.layout.rank
        draw = gen.draw
        dt = draw(st.sampled_from(list(D.ALL)))
        init = T.Broadcast(dt, full, x=to_dtype(gen, gen.expr(max(depth - 1, 0)), dt))
        acc = Leaf(dt, full, name=f"acc{n}", spec=LoopValue("acc"))
        index = Leaf(D.I32, None, name=f"k{n}", spec=LoopValue("index"))
        trips_value = draw(st.integers(0, 3))
        trips = Leaf(D.I32, None, name=f"trips{n}", spec=ScalarArg(f"trips{n}", D.I32, trips_value))
        loads = []
        for i in range(draw(st.integers(0, 2))):
            spec = draw(tensor_inputs(self.layout, 100 * n + i, kinds=["tile"]))
            spec.in_loop, spec.slices = True, trips_value
            loads.append(leaf_for(spec, self.layout, f"xl{n}_{i}"))
        body_gen = T.Gen(draw, gen.blocks, gen.leaves + [acc, acc, index] + loads)
        body = body_gen.expr(depth)
        body = T.Broadcast(dt, full, x=to_dtype(body_gen, body, dt))
        return T.Loop(dt, full, init=init, body=body, acc=acc, index=index, trips=trips, loads=loads,
                      carried_pointers=draw(st.booleans()))


@st.composite
def sinks(draw, gen: T.Gen, root: Node, stores_only: bool = False) -> Tuple[Node, Sink]:
    """The root made storable, and where it goes."""
    full = (True,) * gen.rank
    kind = "store" if stores_only else draw(st.sampled_from(["store"] * 4 + ["atomic_add", "atomic_max",
                                                                            "atomic_min"]))
    if kind == "store":
        dt = root.dtype if root.dtype.torch is not None else D.signed_twin(root.dtype)
        value = T.cast(root, dt, bitcast=dt != root.dtype)
        return T.Broadcast(dt, full, x=value), Sink("store", dt)
    if kind == "atomic_add":
        dt = draw(st.sampled_from([D.I32, D.I64, D.F16, D.BF16, D.F32, D.F64]))
        pointer_as = None
    else:
        dt = draw(st.sampled_from([D.I32, D.I64, D.U32, D.U64, D.F32, D.F64]))
        pointer_as = dt if dt in (D.U32, D.U64) else None
        dt = D.signed_twin(dt) if pointer_as else dt
    value = to_dtype(gen, root, pointer_as or dt)
    extra = gen.as_bool(gen.expr(1)) if draw(st.booleans()) else None
    slots = draw(st.integers(1, 5))
    return T.Broadcast(value.dtype, full, x=value), Sink(kind, dt, slots, pointer_as, extra)


@st.composite
def programs(draw, max_depth: int = 4, small: bool = False, outputs: int = 1, stores_only: bool = False) -> Program:
    """`small`: blocks of at most 8 elements per axis (for runs under QEMU). `outputs` > 1: a store into
    each of that many outputs (so never an atomic); `stores_only`: never an atomic."""
    layout = draw(layouts(small))
    leaves = draw(leaf_pool(layout))
    gen = T.Gen(draw, layout.blocks, leaves, make_loop=LoopMaker(layout))
    root = gen.expr(draw(st.integers(1, max_depth)))
    root, sink = draw(sinks(gen, root, stores_only=stores_only or outputs > 1))
    return Program(layout, root, sink, draw(st.integers(0, 2 ** 32 - 1)), outputs)


@st.composite
def dot_programs(draw, dt, max_depth: int = 2) -> Program:
    """Kernels storing one tl.dot of `dt` tiles (its operands drawn as in `programs`), on square blocks of 16
    or 32: sizes a matrix unit's micro-kernel takes (to_linalg/dot.py), ragged where the sizes do not fill
    the blocks."""
    block = draw(st.sampled_from([16, 32]))
    sizes = tuple(draw(st.integers(1, 2 * block + 1)) for _ in range(2))
    layout = Layout((block, block), sizes, tuple(-(-n // block) for n in sizes))
    leaves = draw(leaf_pool(layout))
    gen = T.Gen(draw, layout.blocks, leaves)
    root = gen.dot(draw(st.integers(0, max_depth)), dt)
    root, sink = draw(sinks(gen, root, stores_only=True))
    return Program(layout, root, sink, draw(st.integers(0, 2 ** 32 - 1)), 1)


# -------------------------------------------------------------------------------------------- source

@dataclass
class Emitter:
    layout: Layout
    lines: List[str] = field(default_factory=list)
    names: dict = field(default_factory=dict)       # id(node) -> variable name (in the current scope)
    indent: str = "    "
    counter: int = 0

    def line(self, text: str) -> None:
        self.lines.append(self.indent + text)

    def assign(self, node: Node, expression: str) -> str:
        name = f"v{self.counter}"
        self.counter += 1
        self.line(f"{name} = {expression}")
        self.line(f"tl.static_assert({name}.dtype == {node.dtype.tl}, \"{name} should be {node.dtype}\")")
        return name

    def emit(self, node: Node) -> str:
        if isinstance(node, T.Const):
            return f"({literal(node.value)})"
        if id(node) in self.names:
            return self.names[id(node)]
        name = self.emit_new(node)
        self.names[id(node)] = name
        return name

    def emit_new(self, node: Node) -> str:
        if isinstance(node, Leaf):
            return node.name
        if isinstance(node, T.Loop):
            return self.emit_loop(node)
        return self.assign(node, self.expression(node))

    def expression(self, node: Node) -> str:
        e = self.emit
        if isinstance(node, T.Unary):
            if node.op == "neg":
                return f"-{e(node.x)}"
            if node.op == "invert":
                return f"~{e(node.x)}"
            return f"tl.{node.op}({e(node.x)})"
        if isinstance(node, T.Binary):
            a, b = e(node.a), e(node.b)
            if node.op in ("max", "min"):
                return f"tl.{node.op}imum({a}, {b})"
            if node.op in ("max_nan", "min_nan"):
                return f"tl.{node.op[:3]}imum({a}, {b}, propagate_nan=tl.PropagateNan.ALL)"
            if node.op == "umulhi":
                return f"tl.umulhi({a}, {b})"
            return f"{a} {node.op} {b}"
        if isinstance(node, T.Where):
            return f"tl.where({e(node.cond)}, {e(node.a)}, {e(node.b)})"
        if isinstance(node, T.Fma):
            return f"tl.fma({e(node.a)}, {e(node.b)}, {e(node.c)})"
        if isinstance(node, T.Cast):
            return f"{e(node.x)}.to({node.dtype.tl}{', bitcast=True' if node.bitcast else ''})"
        if isinstance(node, T.Broadcast):
            return f"tl.broadcast_to({e(node.x)}, {self.layout.shape_source(node.shape)})"
        if isinstance(node, T.Reduce):
            return self.reduction(node)
        if isinstance(node, T.Trans):
            return f"tl.trans({e(node.x)})"
        if isinstance(node, T.JoinSplit):
            return f"tl.split(tl.join({e(node.a)}, {e(node.b)}))[{node.which}]"
        if isinstance(node, T.Gather):
            return f"tl.gather({e(node.src)}, {e(node.index)}, {node.axis})"
        if isinstance(node, T.Dot):
            return f"tl.dot({e(node.a)}, {e(node.b)})"
        if isinstance(node, T.Scan):
            x = e(node.x)
            if node.op == "cummax":
                return f"tl.associative_scan({x}, {node.axis}, _max_combine, reverse={node.reverse})"
            return f"tl.{node.op}({x}, axis={node.axis}, reverse={node.reverse})"
        raise TypeError(type(node).__name__)

    def reduction(self, node: T.Reduce) -> str:
        call = f"tl.{node.op}({self.emit(node.x)}, axis={node.axis}"
        if node.keep_dims:
            return call + ", keep_dims=True)"
        if self.layout.rank == 1:
            return call + ")"
        return call + (")[None, :]" if node.axis == 0 else ")[:, None]")

    def emit_loop(self, loop: T.Loop) -> str:
        acc = loop.acc.name
        self.line(f"{acc} = {self.emit(loop.init)}")
        pointers = {}
        if loop.carried_pointers:
            for leaf in loop.loads:
                pointers[leaf] = f"p_{leaf.spec.arg}"
                self.line(f"{pointers[leaf]} = {leaf.spec.arg} + "
                          f"{self.layout.tile_offsets(f'stride_{leaf.spec.arg}')}")
        self.line(f"for {loop.index.name} in range(0, {loop.trips.spec.arg}):")
        outer, outer_indent = dict(self.names), self.indent
        self.indent += "    "
        for leaf in loop.loads:
            arg = leaf.spec.arg
            address = pointers.get(leaf) or \
                f"{arg} + {loop.index.name} * slice_{arg} + {self.layout.tile_offsets(f'stride_{arg}')}"
            self.line(f"{leaf.name} = {leaf.spec.load(self.layout, pointer=address)}")
        self.line(f"{acc} = {self.emit(loop.body)}")
        for leaf, pointer in pointers.items():
            self.line(f"{pointer} += slice_{leaf.spec.arg}")
        self.names, self.indent = outer, outer_indent
        return self.assign(loop, acc)


def source(program: Program) -> str:
    layout = program.layout
    em = Emitter(layout)
    em.line("pid0 = tl.program_id(0)")
    em.line("r0 = pid0 * BLOCK0 + tl.arange(0, BLOCK0)")
    if layout.rank == 2:
        em.line("pid1 = tl.program_id(1)")
        em.line("r1 = pid1 * BLOCK1 + tl.arange(0, BLOCK1)")
        em.line("mask = (r0[:, None] < size0) & (r1[None, :] < size1)")
    else:
        em.line("mask = r0 < size0")
    in_loops = program.loop_leaves()
    for leaf in program.leaves():
        if id(leaf) not in in_loops:
            em.line(f"{leaf.name} = {leaf.spec.load(layout)}")
    value = em.emit(program.root)
    for name in program.output_names:
        em.line(sink_statement(program, em, value, name))
    args = [a for spec in program.inputs() for a in spec.arguments()]
    scalars = [a for spec in program.inputs() if isinstance(spec, ScalarArg) for a in spec.arguments()]
    blocks = ", ".join(f"BLOCK{d}: tl.constexpr" for d in range(layout.rank))
    sizes = ", ".join(f"size{d}" for d in range(layout.rank))
    signature = ", ".join(args + program.output_names + [sizes, blocks])
    return "\n".join([
        "import triton",
        "import triton.language as tl",
        "",
        "",
        "@triton.jit",
        "def _max_combine(a, b):",
        "    return tl.maximum(a, b)",
        "",
        "",
        f"@triton.jit(do_not_specialize={scalars!r})",
        f"def {KERNEL_NAME}({signature}):",
        *em.lines,
        "",
    ])


def sink_statement(program: Program, em: Emitter, value: str, out: str = "out") -> str:
    sink, layout = program.sink, program.layout
    if sink.kind == "store":
        return f"tl.store({out} + {layout.tile_offsets('size1')}, {value}, mask=mask)"
    pointer = "out" if sink.pointer_as is None else f"out.to(tl.pointer_type({sink.pointer_as.tl}))"
    mask = "mask" if sink.extra_mask is None else f"mask & {em.emit(sink.extra_mask)}"
    slots = f"({layout.tile_offsets('size1')}) % {sink.slots}"
    return f"tl.{sink.kind}({pointer} + {slots}, {value}, mask={mask})"
