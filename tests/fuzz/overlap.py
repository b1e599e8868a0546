"""Launches whose arguments overlap in memory: the fuzzer's kernels (kernels.py) run with some of their
arguments laid into one shared piece of memory: the output in place of an input, shifted views of one
buffer, one buffer passed as both outputs, two outputs made with torch.frombuffer over one bytearray and
over a memoryview of it (different storages, same memory), overlapping and disjoint views of one storage.

Only launches whose result Triton defines are drawn. On a GPU each program sees memory as it is, so a
program's stores must not touch bytes another program reads or writes; within a program every load comes
before the one store of each output, and two outputs may store to one byte only the same element of the
same value. `defined` checks exactly that on the bytes each program touches, so the expected memory is the
memory before the launch with each output's elements replaced by the reference (evaluated on the inputs
as laid out, overlaps included), and every other byte unchanged.

The long run: python -m tests.fuzz.overlap --target riscv64 --count 300 --seed 1
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import itertools
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np
import torch
from hypothesis import strategies as st

from . import dtypes as D
from . import kernels as K
from . import runner as R
from . import tree as T
from .dtypes import DType
from .reference import Evaluator

GUARD = 32               # bytes before and after the views in the shared memory (a multiple of 16)
FILL = 0xA5              # what shared memory holds where no input's data lies
KINDS = ("in_place", "shifted", "output_twice", "frombuffer_pair", "read_views", "disjoint_views")
TWO_OUTPUTS = ("output_twice", "frombuffer_pair")
INPUTS_NEEDED = {"in_place": 1, "shifted": 1, "read_views": 2}
SHIFTS = 6               # shifts drawn per pair of overlapping views
STATUSES = ("passed", "mismatch", "rejected", "failed", "emulator_abort", "invalid")


@dataclass(frozen=True)
class View:
    """One argument's tensor over the shared memory."""
    arg: str
    offset: int            # bytes from the start of the shared memory
    length: int            # elements the tensor holds (at least those the kernel touches)
    dtype: DType
    own_storage: bool      # torch.frombuffer over those bytes (a storage of its own), else a view of the
    #                        memory's one tensor (views with equal offset, length and dtype are one tensor)

    @property
    def itemsize(self) -> int:
        return itemsize(self.dtype)

    @property
    def end(self) -> int:
        return self.offset + self.length * self.itemsize

    def describe(self) -> str:
        span = f"{self.offset}:{self.end}"
        if self.own_storage:
            return f"{self.arg} = torch.frombuffer(memoryview(memory)[{span}], dtype={self.dtype.torch})"
        return f"{self.arg} = base[{span}].view({self.dtype.torch})"


@dataclass(frozen=True)
class Plan:
    kind: str
    views: Tuple[View, ...]
    size: int                  # bytes of shared memory
    python_launcher: bool      # a launch hook set, so triton's launch goes through the Python launcher

    def view(self, arg: str) -> View:
        return next(v for v in self.views if v.arg == arg)

    @property
    def args(self) -> set:
        return {v.arg for v in self.views}

    def describe(self) -> str:
        path = "the Python launcher (a launch hook is set)" if self.python_launcher else "the fast path"
        return "\n".join([f"launch: {self.kind}, through {path}; memory = bytearray({self.size}), "
                          f"base = torch.frombuffer(memory, dtype=torch.uint8)"] +
                         [f"  {v.describe()}" for v in self.views])


def itemsize(dt: DType) -> int:
    return torch.empty((), dtype=dt.torch).element_size()


def compatible(a: DType, b: DType) -> bool:
    """Dtypes that may view one element's bytes: the same width, and bool only with bool (torch and Triton
    read any nonzero byte as true, but the reference would not)."""
    return itemsize(a) == itemsize(b) and (a == D.BOOL) == (b == D.BOOL)


# ---------------------------------------------------------------------------------------- footprints

def extent(spec: K.TensorInput, layout: K.Layout) -> int:
    """Elements of an input's data (runner.Run.tensor_input)."""
    sizes = layout.sizes
    if spec.kind in ("tile", "block"):
        rows, cols = sizes[0], sizes[1] if len(sizes) > 1 else 1
        stride = cols + (spec.pad if spec.rank == 2 else 0)
        return (max(spec.slices, 1) if spec.in_loop else 1) * rows * stride
    if spec.kind in ("vec0", "vec1"):
        return sizes[int(spec.kind[-1])]
    return 1 if spec.kind == "scalar" else layout.grid[0]


def program_ids(layout: K.Layout):
    return itertools.product(*(range(g) for g in layout.grid))


def lanes(layout: K.Layout, pid) -> List[Tuple[int, ...]]:
    """The in-bounds (row, column) of program `pid`'s tile."""
    axes = [[r for r in range(p * b, (p + 1) * b) if r < n] for p, b, n in zip(pid, layout.blocks, layout.sizes)]
    return list(itertools.product(*axes))


def read_elements(spec: K.TensorInput, layout: K.Layout, pid) -> set:
    """Element offsets program `pid` loads from the argument (masked lanes load nothing)."""
    if spec.kind == "scalar":
        return {0}
    if spec.kind == "per_program":
        return {pid[0]}
    tile = lanes(layout, pid)
    if spec.kind in ("vec0", "vec1"):
        return {lane[int(spec.kind[-1])] for lane in tile}
    cols = layout.sizes[1] if layout.rank == 2 else 1
    stride = cols + (spec.pad if spec.rank == 2 else 0)
    offsets = {lane[0] * stride + (lane[1] if layout.rank == 2 else 0) for lane in tile}
    if not spec.in_loop:
        return offsets
    return {k * layout.sizes[0] * stride + o for k in range(spec.slices) for o in offsets}


def written_elements(layout: K.Layout, pid) -> set:
    cols = layout.sizes[1] if layout.rank == 2 else 1
    return {lane[0] * cols + (lane[1] if layout.rank == 2 else 0) for lane in lanes(layout, pid)}


def element_bytes(view: View, elements) -> set:
    return {view.offset + e * view.itemsize + b for e in elements for b in range(view.itemsize)}


def defined(program: K.Program, plan: Plan) -> bool:
    """Whether the launch's result is defined: no program stores to a byte another program touches, and
    stores to one byte always write the same byte of the same element's value."""
    specs = {spec.arg: spec for spec in program.inputs() if isinstance(spec, K.TensorInput)}
    readers: Dict[int, set] = collections.defaultdict(set)      # byte -> {program}
    writes: Dict[int, set] = collections.defaultdict(set)       # byte -> {(program, element, byte in it)}
    for pid in program_ids(program.layout):
        for view in plan.views:
            if view.arg in specs:
                for byte in element_bytes(view, read_elements(specs[view.arg], program.layout, pid)):
                    readers[byte].add(pid)
        for name in program.output_names:
            view = plan.view(name)
            for e in written_elements(program.layout, pid):
                for b in range(view.itemsize):
                    writes[view.offset + e * view.itemsize + b].add((pid, e, b))
    for byte, writers in writes.items():
        if len(writers) > 1:
            return False
        (pid, _, _), = writers
        if readers.get(byte, set()) - {pid}:
            return False
    return True


def output_bytes(program: K.Program, plan: Plan) -> np.ndarray:
    """Which bytes of the shared memory the outputs' stores cover."""
    covered = np.zeros(plan.size, dtype=bool)
    count = int(np.prod(program.layout.sizes))
    for name in program.output_names:
        view = plan.view(name)
        covered[view.offset:view.offset + count * view.itemsize] = True
    return covered


# ---------------------------------------------------------------------------------------- strategies

def laid_out(kind: str, views: List[View]) -> Plan:
    """Views at offsets relative to each other, moved by a multiple of 16 bytes (keeping every view's
    alignment) to start at least GUARD bytes into the memory."""
    shift = align(-min(v.offset for v in views), 16) + GUARD
    moved = tuple(View(v.arg, v.offset + shift, v.length, v.dtype, v.own_storage) for v in views)
    return Plan(kind, moved, max(v.end for v in moved) + GUARD, False)


def align(n: int, to: int) -> int:
    return -(-n // to) * to


@dataclass
class Drawn:
    """What every plan needs to know of the program."""
    program: K.Program
    inputs: List[K.TensorInput] = field(init=False)

    def __post_init__(self):
        self.inputs = [s for s in self.program.inputs() if isinstance(s, K.TensorInput)]

    @property
    def out_dtype(self) -> DType:
        return self.program.sink.dtype

    @property
    def count(self) -> int:
        return int(np.prod(self.program.layout.sizes))

    def extent(self, spec) -> int:
        return extent(spec, self.program.layout)

    def like_output(self) -> List[K.TensorInput]:
        return [s for s in self.inputs if compatible(s.dtype, self.out_dtype)]

    def after(self, views: List[View], gap: int) -> int:
        return max(v.end for v in views) + gap

    def outputs_from(self, start: int, own: List[bool]) -> List[View]:
        """Each output in its own bytes from `start` on."""
        views, at = [], start
        for name, own_storage in zip(self.program.output_names, own):
            at = align(at, itemsize(self.out_dtype))
            views.append(View(name, at, self.count, self.out_dtype, own_storage))
            at = views[-1].end
        return views


def in_place(d: Drawn, draw) -> List[List[View]]:
    """The output over an input's first elements: the same tensor, another view of its storage, or another
    storage over its bytes."""
    out = []
    for spec in d.like_output():
        x = View(spec.arg, 0, d.extent(spec), spec.dtype, draw(st.booleans()))
        same = spec.dtype == d.out_dtype and x.length >= d.count and not x.own_storage and draw(st.booleans())
        out.append([x, dataclasses.replace(x, arg="out") if same else
                    View("out", 0, d.count, d.out_dtype, draw(st.booleans()))])
    return out


def shifts(draw, low: int, high: int) -> List[int]:
    """A few shifts in [low, high], the ends among them: every one is checked for a defined result, and
    large tiles have thousands."""
    return sorted({low, high} | set(draw(st.lists(st.integers(low, high), max_size=SHIFTS))))


def shifted(d: Drawn, draw) -> List[List[View]]:
    """x = buf[0:n], out = buf[k:k + count], for shifts k that keep the result defined (the ends: side by
    side)."""
    out = []
    for spec in d.like_output():
        n = d.extent(spec)
        own = [draw(st.booleans()), draw(st.booleans())]
        size = itemsize(spec.dtype)
        out += [[View(spec.arg, 0, n, spec.dtype, own[0]), View("out", k * size, d.count, d.out_dtype, own[1])]
                for k in shifts(draw, -d.count, n) if k]
    return out


def output_twice(d: Drawn, draw) -> List[List[View]]:
    """One buffer as both outputs: the same tensor, or two storages over its bytes."""
    own = draw(st.booleans())
    return [[View(name, 0, d.count, d.out_dtype, own) for name in d.program.output_names]]


def frombuffer_pair(d: Drawn, draw) -> List[List[View]]:
    """torch.frombuffer over the whole memory and over memoryview(memory)[offset:], each output storing
    where the other does not: the first storage's bytes contain the second's."""
    size = itemsize(d.out_dtype)
    offset = align(d.count * size, 16) + draw(st.sampled_from([0, 0, 16]))
    whole, part = draw(st.permutations(d.program.output_names))
    return [[View(whole, 0, (offset + d.count * size) // size, d.out_dtype, True),
             View(part, offset, d.count, d.out_dtype, True)]]


def read_views(d: Drawn, draw) -> List[List[View]]:
    """Two inputs over overlapping bytes (the reference reads both from them), the output after them."""
    out, gap = [], draw(st.sampled_from([0, 16]))
    for a, b in itertools.permutations(d.inputs, 2):
        own = [draw(st.booleans()) for _ in range(2 + d.program.outputs)]
        size = itemsize(b.dtype)
        # inputs of widths that do not match share the storage, side by side
        ks = shifts(draw, -d.extent(b) + 1, d.extent(a) - 1) if compatible(a.dtype, b.dtype) else \
            [align(d.extent(a) * itemsize(a.dtype), size) // size]
        for k in ks:
            views = [View(a.arg, 0, d.extent(a), a.dtype, own[0]), View(b.arg, k * size, d.extent(b), b.dtype, own[1])]
            out.append(views + d.outputs_from(d.after(views, gap), own[2:]))
    return out


def disjoint_views(d: Drawn, draw) -> List[List[View]]:
    """An input (if the kernel has any) and the outputs in one storage, none overlapping."""
    own = [draw(st.booleans()) for _ in range(1 + d.program.outputs)]
    views = [View(s.arg, 0, d.extent(s), s.dtype, own[0]) for s in d.inputs[:1]]
    start = d.after(views, draw(st.sampled_from([0, 16]))) if views else 0
    return [views + d.outputs_from(start, own[1:])]


BUILDERS = {"in_place": in_place, "shifted": shifted, "output_twice": output_twice,
            "frombuffer_pair": frombuffer_pair, "read_views": read_views, "disjoint_views": disjoint_views}


def stored_as(program: K.Program, dt: DType) -> K.Program:
    """The program storing its value converted to `dt` (so that its output can lie over an input of `dt`)."""
    full = (True,) * program.layout.rank
    root = T.Broadcast(dt, full, x=K.to_dtype(None, program.root, dt))
    return K.Program(program.layout, root, K.Sink("store", dt), program.data_seed, program.outputs)


@st.composite
def launches(draw, small: bool = True, max_depth: int = 4, kinds=KINDS) -> Tuple[K.Program, Plan]:
    kind = draw(st.sampled_from(kinds))
    needed = INPUTS_NEEDED.get(kind, 0)
    program = draw(K.programs(max_depth=max_depth, small=small, outputs=2 if kind in TWO_OUTPUTS else 1,
                              stores_only=True).filter(lambda p: len(Drawn(p).inputs) >= needed))
    d = Drawn(program)
    if kind in ("in_place", "shifted") and d.inputs and not d.like_output():
        d = Drawn(stored_as(program, draw(st.sampled_from(d.inputs)).dtype))
        program = d.program
    plans = [laid_out(kind, views) for views in BUILDERS[kind](d, draw)]
    plans = [p for p in plans if defined(program, p)]
    if not plans:                       # e.g. no input of the output's width: the layout always defined
        plans = [laid_out("disjoint_views", views) for views in disjoint_views(d, draw)]
    plan = draw(st.sampled_from(plans))
    plan = Plan(plan.kind, plan.views, plan.size, draw(st.booleans()))
    assert defined(program, plan), plan.describe()
    return program, plan


# ------------------------------------------------------------------------------------------- memory

class Memory:
    """The shared memory of one launch. Filled by a first Run.prepare (each input's data written where its
    view lies, later ones over earlier ones), then sealed; a second Run.prepare reads each input back, so
    the reference sees what the kernel will."""

    def __init__(self, plan: Plan):
        self.plan = plan
        self.bytes = bytearray([FILL]) * plan.size
        self.base = torch.frombuffer(self.bytes, dtype=torch.uint8)
        self.tensors: Dict[str, torch.Tensor] = {}
        self.initial: Optional[bytes] = None

    @property
    def args(self) -> set:
        return self.plan.args

    def tensor(self, arg: str) -> torch.Tensor:
        if arg not in self.tensors:
            view = self.plan.view(arg)
            twin = next((t for a, t in self.tensors.items() if not view.own_storage and self._same(a, view)), None)
            self.tensors[arg] = twin if twin is not None else self._make(view)
        return self.tensors[arg]

    def _same(self, arg: str, view: View) -> bool:
        other = self.plan.view(arg)
        return not other.own_storage and (other.offset, other.length, other.dtype) == \
            (view.offset, view.length, view.dtype)

    def _make(self, view: View) -> torch.Tensor:
        if view.own_storage:
            return torch.frombuffer(memoryview(self.bytes)[view.offset:view.end], dtype=view.dtype.torch)
        return self.base[view.offset:view.end].view(view.dtype.torch)

    def input(self, arg: str, data: np.ndarray) -> np.ndarray:
        view = self.plan.view(arg)
        assert data.size == view.length, (arg, data.size, view.length)
        if self.initial is None:
            self.tensor(arg).copy_(D.to_torch(data.reshape(-1), view.dtype))
            return data
        return D.from_torch(self.tensor(arg).clone(), view.dtype)

    def seal(self) -> None:
        self.initial = bytes(self.bytes)

    def elements(self, arg: str, count: int) -> np.ndarray:
        view = self.plan.view(arg)
        raw = bytes(self.bytes[view.offset:view.offset + count * view.itemsize])
        return D.from_torch(torch.frombuffer(bytearray(raw), dtype=view.dtype.torch), view.dtype)


@contextlib.contextmanager
def python_launcher(on: bool):
    """A launch hook makes triton's launch take the Python launcher instead of the fast path."""
    import triton
    hook = triton.knobs.runtime.launch_enter_hook

    def ignore(metadata):
        pass
    if on:
        hook.add(ignore)
    try:
        yield
    finally:
        if on:
            hook.remove(ignore)


# ---------------------------------------------------------------------------------------------- run

def source(program: K.Program, plan: Plan) -> str:
    """The kernel's source with the launch's memory layout, a reproducer on its own."""
    return K.source(program) + "\n# " + plan.describe().replace("\n", "\n# ") + "\n"


def run(program: K.Program, plan: Plan) -> R.Outcome:
    src = source(program, plan)
    try:
        kernel = R.load_kernel(K.source(program))
        memory = Memory(plan)
        R.Run(program, memory=memory).prepare()
        memory.seal()
        r = R.Run(program, memory=memory)
        r.prepare()
        with python_launcher(plan.python_launcher):
            R.launch(kernel, r, [memory.tensor(name) for name in program.output_names])
    except R.launch_errors() as err:
        return R.launch_failure(err, src)
    return check(r, memory, src)


def check(r: R.Run, memory: Memory, src: str) -> R.Outcome:
    program, plan = r.program, memory.plan
    ref = R.store_reference(r, Evaluator(r.env, r.layout.blocks, r.layout.grid, r.slice_of))
    problems = []
    for name in program.output_names:
        got = memory.elements(name, ref.value.size).reshape(ref.value.shape)
        problems.append(R.differences(got, ref, f" of {name}"))
    final = np.frombuffer(bytes(memory.bytes), dtype=np.uint8)
    changed = (final != np.frombuffer(memory.initial, dtype=np.uint8)) & ~output_bytes(program, plan)
    if changed.any():
        where = np.flatnonzero(changed)
        problems.append(f"{where.size} bytes no output stores to changed, at offsets {where[:16].tolist()}")
    for buffer, before in r.buffers:
        if not torch.equal(buffer.full.view(-1).view(torch.uint8), before.view(-1).view(torch.uint8)):
            problems.append("the kernel wrote into an input")
            break
    problems = [p for p in problems if p]
    if problems:
        return R.Outcome("mismatch", "\n".join([plan.describe()] + problems), src)
    return R.Outcome("passed", "", src)


# ------------------------------------------------------------------------------------------ long run

def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", choices=("host", "riscv64"), default="host")
    parser.add_argument("--count", type=int, default=300, help="launches, shared evenly by the kinds of layout")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kind", choices=KINDS, action="append", help="only these kinds of layout")
    parser.add_argument("--save", default=None, help="directory for the launches that did not pass")
    parser.add_argument("--shrink", action="store_true",
                        help="stop at the first launch that is not passed or rejected and shrink it to a minimal one")
    args = parser.parse_args()
    os.environ["SPINE_TARGET"] = args.target
    import triton
    from spine.driver import CPUDriver

    triton.runtime.driver.set_active(CPUDriver(target=args.target))
    kinds = args.kind or KINDS
    save = Path(args.save or Path(tempfile.gettempdir()) / "spine_fuzz_findings" / f"overlap_{args.target}")
    tally = Tally(started=time.time(), save=save)
    try:
        for kind in kinds:
            search(args, kind, -(-args.count // len(kinds)), tally)
    except AssertionError as failure:
        print("minimal failing launch:", str(failure).split("Falsifying example")[0], sep="\n")
        return 1
    print(f"target {args.target}, seed {args.seed}, {time.time() - tally.started:.0f} s")
    for key in ("generated",) + tuple(s for s in STATUSES if tally.counts[s]):
        print(f"  {key:16s} {tally.counts[key]}")
    for key, n in sorted(tally.kinds.items()):
        print(f"  {key:32s} {n}")
    return 1 if tally.found else 0


@dataclass
class Tally:
    started: float
    save: Path
    counts: collections.Counter = field(default_factory=collections.Counter)
    kinds: collections.Counter = field(default_factory=collections.Counter)
    found: List[R.Outcome] = field(default_factory=list)
    seen: set = field(default_factory=set)

    def add(self, plan: Plan, outcome: R.Outcome) -> None:
        self.counts["generated"] += 1
        self.counts[outcome.status] += 1
        self.kinds[f"{plan.kind}/{outcome.status}"] += 1
        if outcome.status not in ("passed", "rejected", "emulator_abort"):
            self.found.append(outcome)
            self.save.mkdir(parents=True, exist_ok=True)
            name = self.save / f"{outcome.status}_{self.counts['generated']:05d}"
            name.with_suffix(".py").write_text(outcome.source)
            name.with_suffix(".txt").write_text(outcome.detail)
            print(f"{outcome.status} (saved as {name}.py, .txt):\n{outcome.detail}\n\n{outcome.source}", flush=True)
        if self.counts["generated"] % 50 == 0:
            print(f"  {self.counts['generated']} launches, {time.time() - self.started:.0f} s: "
                  f"{dict(self.counts)}", flush=True)


def search(args, kind: str, count: int, tally: Tally) -> None:
    from hypothesis import HealthCheck, Phase, assume, given, seed, settings

    @seed(args.seed)
    @settings(max_examples=count, database=None, deadline=None, report_multiple_bugs=False,
              phases=[Phase.generate] + ([Phase.shrink] if args.shrink else []),
              suppress_health_check=list(HealthCheck))
    @given(launches(small=args.target == "riscv64", kinds=(kind,)))
    def one(launch):
        program, plan = launch
        if not args.shrink:                    # hypothesis repeats itself; count distinct launches only
            assume(source(program, plan) not in tally.seen)
            tally.seen.add(source(program, plan))
        outcome = run(program, plan)
        tally.add(plan, outcome)
        if args.shrink and outcome.status not in ("passed", "rejected", "emulator_abort"):
            raise AssertionError(f"{outcome.status}: {outcome.detail}\n\n{outcome.source}")
    one()


if __name__ == "__main__":
    sys.exit(main())
