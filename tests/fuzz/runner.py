"""Run one fuzzed program: write its source to a module, make its data, launch it on the active Spine
driver, evaluate the reference and compare. Tensors sit inside larger buffers whose margins hold a
sentinel, so a write outside the output or into an input is caught too."""
from __future__ import annotations

import hashlib
import importlib.util
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from . import dtypes as D
from . import kernels as K
from . import tree as T
from .reference import Evaluator, Ref, finish, gamma, spacing, F64_EPS
from .dtypes import DType

GUARD = 16          # sentinel elements on each side of every buffer
QEMU_RTZ_ABORT = "decode_save_opc: Assertion"
_MODULE_DIR = None
_MODULES: dict = {}


@dataclass
class Outcome:
    status: str          # "passed", "mismatch", "rejected" (clean unsupported-op error), "failed", "invalid",
    #                      "emulator_abort" (QEMU itself aborted, see run())
    detail: str = ""
    source: str = ""


# ------------------------------------------------------------------------------------------ modules

def load_kernel(src: str):
    """triton.jit needs its source in a real file; one module per distinct source."""
    global _MODULE_DIR
    key = hashlib.sha256(src.encode()).hexdigest()[:16]
    if key not in _MODULES:
        if _MODULE_DIR is None:
            _MODULE_DIR = Path(tempfile.mkdtemp(prefix="spine_fuzz_"))
        path = _MODULE_DIR / f"fuzz_{key}.py"
        path.write_text(src)
        spec = importlib.util.spec_from_file_location(f"spine_fuzz_{key}", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        _MODULES[key] = getattr(module, K.KERNEL_NAME)
    return _MODULES[key]


# --------------------------------------------------------------------------------------------- data

def random_values(rng: np.random.Generator, dt: DType, count: int) -> np.ndarray:
    """Values of dtype `dt` (reference representation): ordinary ones, extremes, and IEEE specials."""
    if dt == D.BOOL:
        return rng.random(count) < 0.5
    if dt.is_int:
        if rng.random() < 0.5:
            return np.clip(rng.integers(-8, 9, count), dt.int_min, dt.int_max).astype(dt.numpy)
        return rng.integers(dt.int_min, dt.int_max, count, dtype=dt.numpy, endpoint=True)
    mode = rng.integers(0, 4)
    if mode == 0:
        values = rng.standard_normal(count)
    elif mode == 1:
        values = rng.standard_normal(count) * 10.0 ** rng.integers(-6, 6, count)
    elif mode == 2:
        values = rng.integers(-8, 9, count).astype(np.float64)
    else:
        specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, dt.max_finite, -dt.max_finite, dt.denorm_min,
                             1.0, -1.0])
        values = np.where(rng.random(count) < 0.3, rng.choice(specials, count), rng.standard_normal(count))
    return D.round_to(values, dt)


def sentinel(dt: DType) -> np.ndarray:
    return np.array(np.nan if dt.is_float else (1 if dt == D.BOOL else dt.int_max // 3 + 5)).astype(
        np.float64 if dt.is_float else dt.numpy)


@dataclass
class Buffer:
    """A torch tensor with GUARD sentinel elements before and after the part the kernel may touch."""
    dtype: DType
    values: np.ndarray                  # the kernel-visible elements (reference representation)
    full: torch.Tensor = None

    def __post_init__(self):
        flat = self.values.reshape(-1)
        margin = np.broadcast_to(sentinel(self.dtype), (GUARD,))
        self.full = D.to_torch(np.concatenate([margin, flat, margin]).astype(flat.dtype), self.dtype)

    @property
    def view(self) -> torch.Tensor:
        return self.full[GUARD:GUARD + max(self.values.size, 1)]

    def contents(self) -> np.ndarray:
        return D.from_torch(self.full[GUARD:GUARD + self.values.size], self.dtype)

    def margins_intact(self) -> bool:
        got = D.from_torch(self.full, self.dtype)
        margins = np.concatenate([got[:GUARD], got[GUARD + self.values.size:]])
        expected = np.broadcast_to(sentinel(self.dtype), margins.shape)
        return bool(np.all((margins == expected) | (np.isnan(margins) & np.isnan(expected))
                           if self.dtype.is_float else margins == expected))


@dataclass
class Run:
    """Data and reference values of one launch."""
    program: K.Program
    env: dict = field(default_factory=dict)           # Leaf -> Ref
    args: dict = field(default_factory=dict)          # argument name -> value
    buffers: list = field(default_factory=list)       # (Buffer, copy of its torch tensor) of inputs
    slices: dict = field(default_factory=dict)        # id(loop leaf) -> [Ref per iteration]
    initial: np.ndarray = None                        # atomics: the output slots before the launch
    memory: object = None                             # arguments that share memory (overlap.Memory), if any

    @property
    def layout(self) -> K.Layout:
        return self.program.layout

    def rng(self, name: str) -> np.random.Generator:
        """A generator per argument, so a kernel built from part of this one sees the same data."""
        name_key = int(hashlib.sha256(name.encode()).hexdigest()[:8], 16)
        return np.random.default_rng([self.program.data_seed, name_key])

    def grid4(self):
        g, b = self.layout.grid, self.layout.blocks
        return (g[0], b[0], g[1] if len(g) > 1 else 1, b[1] if len(b) > 1 else 1)

    # ---- leaves
    def prepare(self) -> None:
        for leaf in self.program.leaves():
            spec = leaf.spec
            if isinstance(spec, K.TensorInput):
                self.tensor_input(leaf, spec)
            elif isinstance(spec, K.ScalarArg):
                self.args[spec.arg] = spec.value
                # Triton passes float arguments as fp32.
                value = D.round_to(np.array(spec.value, dtype=np.float64), spec.dtype) if spec.dtype.is_float \
                    else np.array(spec.value).astype(spec.dtype.numpy)
                self.env[leaf] = Ref(value, np.array(0.0), spec.dtype)
            elif isinstance(spec, K.Builtin):
                self.env[leaf] = self.builtin(spec.kind)

    def builtin(self, kind: str) -> Ref:
        g0, b0, g1, b1 = self.grid4()
        r0 = (np.arange(g0 * b0, dtype=np.int32)).reshape(g0, b0, 1, 1)
        r1 = (np.arange(g1 * b1, dtype=np.int32)).reshape(1, 1, g1, b1)
        if kind == "r0":
            return Ref(r0, np.array(0.0), D.I32)
        if kind == "r1":
            return Ref(r1, np.array(0.0), D.I32)
        if kind == "pid0":
            return Ref(np.arange(g0, dtype=np.int32).reshape(g0, 1, 1, 1), np.array(0.0), D.I32)
        sizes = self.layout.sizes
        mask = (r0 < sizes[0]) & ((r1 < sizes[1]) if len(sizes) > 1 else True)
        return Ref(mask, np.array(0.0), D.BOOL)

    def tensor_input(self, leaf, spec: K.TensorInput) -> None:
        g0, b0, g1, b1 = self.grid4()
        sizes = self.layout.sizes
        if spec.kind in ("tile", "block"):
            rows, cols = sizes[0], sizes[1] if len(sizes) > 1 else 1
            stride = cols + (spec.pad if spec.rank == 2 else 0)      # 1-D tiles are contiguous
            tiles = max(spec.slices, 1) if spec.in_loop else 1
            data = self.input_values(spec, tiles * rows * stride).reshape(tiles, rows, stride)
            refs = [[a.reshape(g0, b0, g1, b1) for a in self.padded(spec, data[t, :, :cols], (g0 * b0, g1 * b1))]
                    for t in range(tiles)]
            if spec.rank == 2:
                self.args[f"stride_{spec.arg}"] = stride
            if spec.in_loop:
                self.args[f"slice_{spec.arg}"] = rows * stride
                self.slices[id(leaf)] = [Ref(r[0], r[1], spec.dtype) for r in refs]
            else:
                self.env[leaf] = Ref(refs[0][0], refs[0][1], spec.dtype)
        elif spec.kind in ("vec0", "vec1"):
            axis = int(spec.kind[-1])
            data = self.input_values(spec, sizes[axis])
            value, err = self.padded(spec, data[None, :], (1, [g0 * b0, g1 * b1][axis]))
            shape = (g0, b0, 1, 1) if axis == 0 else (1, 1, g1, b1)
            self.env[leaf] = Ref(value.reshape(shape), err.reshape(shape), spec.dtype)
        else:
            count = 1 if spec.kind == "scalar" else g0
            data = self.input_values(spec, count)
            shape = (1, 1, 1, 1) if spec.kind == "scalar" else (g0, 1, 1, 1)
            self.env[leaf] = Ref(data.reshape(shape), np.array(0.0), spec.dtype)
        if self.shares_memory(spec.arg):
            self.args[spec.arg] = self.memory.tensor(spec.arg)
            return
        buffer = Buffer(spec.dtype, data)
        self.args[spec.arg] = buffer.view
        self.buffers.append((buffer, buffer.full.clone()))

    def shares_memory(self, arg: str) -> bool:
        return self.memory is not None and arg in self.memory.args

    def input_values(self, spec: K.TensorInput, count: int) -> np.ndarray:
        """Random data, or, for an argument in shared memory, what the kernel will find there."""
        data = random_values(self.rng(spec.arg), spec.dtype, count)
        return self.memory.input(spec.arg, data) if self.shares_memory(spec.arg) else data

    @staticmethod
    def padded(spec: K.TensorInput, data: np.ndarray, shape) -> tuple:
        """The tile layout of a masked load: data where in bounds, `other` (or unknown) elsewhere."""
        other = 0 if spec.other is None else spec.other
        if spec.dtype.is_float:
            fill = D.round_to(np.array(float(other)), spec.dtype)
        else:
            fill = np.array(other).astype(spec.dtype.numpy)
        value = np.full(shape, fill, dtype=data.dtype)
        err = np.full(shape, np.inf if spec.other is None else 0.0)
        value[:data.shape[0], :data.shape[1]] = data
        err[:data.shape[0], :data.shape[1]] = 0.0
        return value, err

    def slice_of(self, leaf, k: int) -> Ref:
        return self.slices[id(leaf)][k]


# ------------------------------------------------------------------------------------------ checking

def differences(got: np.ndarray, ref: Ref, what: str = "") -> str:
    """The elements outside the reference's bound, described ("" if none)."""
    bad = bad_elements(got, ref)
    if not bad.any():
        return ""
    where = np.argwhere(bad)[:8]
    rows = [f"  at {tuple(int(i) for i in w)}: kernel {got[tuple(w)]!r}, reference {ref.value[tuple(w)]!r} "
            f"(bound {float(np.broadcast_to(ref.err, ref.value.shape)[tuple(w)])})" for w in where]
    return f"{int(bad.sum())} of {bad.size} elements{what} differ:\n" + "\n".join(rows)


def bad_elements(got: np.ndarray, ref: Ref) -> np.ndarray:
    """Known elements where the kernel's value is outside the reference's bound."""
    v, err = np.broadcast_arrays(ref.value, ref.err)
    known = ~np.isinf(err)
    if ref.dtype.is_float:
        with np.errstate(invalid="ignore"):
            both_nan = np.isnan(got) & np.isnan(v)
            ok = (got == v) | (np.abs(got - v) <= err) | both_nan
    else:
        ok = got == v
    return known & ~ok


def store_reference(run: Run, ev: Evaluator) -> Ref:
    program = run.program
    full = ev.full(ev.eval(program.root), program.root.shape)
    g0, b0, g1, b1 = run.grid4()
    sizes = run.layout.sizes
    rows, cols = sizes[0], sizes[1] if len(sizes) > 1 else 1
    flat = lambda a: a.reshape(g0 * b0, g1 * b1)[:rows, :cols]      # noqa: E731
    return Ref(flat(full.value), flat(full.err), full.dtype)


def atomic_reference(run: Run, ev: Evaluator, initial: np.ndarray) -> Ref:
    program, sink = run.program, run.program.sink
    full = (True,) * run.layout.rank
    value = ev.full(ev.eval(program.root), full)
    mask = run.builtin("mask").value
    mask_unknown = np.zeros(mask.shape, dtype=bool)
    if sink.extra_mask is not None:
        extra = ev.full(ev.eval(sink.extra_mask), full)
        mask_unknown = mask & extra.unknown
        mask = mask & extra.value
    r0, r1 = run.builtin("r0").value, run.builtin("r1").value if run.layout.rank == 2 else 0
    size1 = run.layout.sizes[1] if run.layout.rank == 2 else 0
    slot = np.broadcast_to((r0 * size1 + r1) % sink.slots if run.layout.rank == 2 else r0 % sink.slots,
                           mask.shape)
    dt = value.dtype
    start = initial.astype(dt.numpy) if not dt.is_float else initial
    out_v, out_e = [], []
    for s in range(sink.slots):
        sel = mask & (slot == s)
        vals, errs = value.value[sel], value.err[sel]
        unknown = bool(np.any(mask_unknown & (slot == s))) or bool(np.any(np.isinf(errs)))
        v, e = combine_atomic(sink.kind, dt, start[s], vals, errs)
        out_v.append(v)
        out_e.append(np.inf if unknown else e)
    result = np.array(out_v).astype(dt.numpy)
    return Ref(result, np.array(out_e, dtype=np.float64), dt)


def combine_atomic(kind: str, dt: DType, start, vals: np.ndarray, errs: np.ndarray):
    """One slot's final value: the atomics' order is free, so float sums get the any-order bound."""
    if kind == "atomic_add":
        if not dt.is_float:
            return np.sum(np.concatenate([[start], vals]).astype(dt.numpy), dtype=dt.numpy), 0.0
        terms = np.concatenate([[start], vals])
        errors = np.concatenate([[0.0], errs])
        n = terms.size
        magnitude = np.sum(np.abs(np.where(np.isfinite(terms), terms, 0.0)))
        value = D.round_to(np.sum(terms), dt)
        err = errors.sum() + (gamma(n - 1, dt) + n * F64_EPS) * magnitude + (spacing(value, dt) if n > 1 else 0.0)
        if not np.all(np.isfinite(terms)):
            err = 0.0 if errors.sum() == 0 else np.inf
        if magnitude * (1 + gamma(n, dt)) > dt.max_finite:
            err = np.inf
        return value, float(finish(np.array(value), np.array(err), dt))
    terms = np.concatenate([[start], vals])
    if dt.is_float and np.any(np.isnan(terms)):
        return start, np.inf
    pick = np.max if kind == "atomic_max" else np.min
    best = pick(terms)
    err = float(np.max(np.concatenate([[0.0], errs])))
    return best, err


# ---------------------------------------------------------------------------------------------- run

def run(program: K.Program) -> Outcome:
    """Launch `program` on the active driver and compare it with the reference."""
    src = K.source(program)
    try:
        kernel = load_kernel(src)
        r = Run(program)
        r.prepare()
        out = make_output(r)
        launch(kernel, r, [out.view])
    except launch_errors() as err:
        return launch_failure(err, src)
    return check(r, out, src)


def launch(kernel, r: Run, outputs: list) -> None:
    layout = r.layout
    args = [r.args[a] for spec in r.program.inputs() for a in spec.arguments()]
    constexprs = {f"BLOCK{d}": b for d, b in enumerate(layout.blocks)}
    kernel[layout.grid](*args, *outputs, *layout.sizes, **constexprs)


def launch_errors() -> tuple:
    from triton.compiler.errors import CompilationError
    from spine.errors import KernelFault, SpineCompilationError
    return SpineCompilationError, CompilationError, KernelFault, RuntimeError, OSError


def launch_failure(err: Exception, src: str) -> Outcome:
    """The outcome of a compile or launch that raised `err`."""
    from triton.compiler.errors import CompilationError
    from spine.errors import KernelFault, SpineCompilationError

    if isinstance(err, SpineCompilationError):
        status = "rejected" if "unsupported" in str(err) else "failed"
        return Outcome(status, f"{type(err).__name__}: {err}", src)
    if isinstance(err, CompilationError):
        return Outcome("invalid", f"{type(err).__name__}: {err}", src)
    if not isinstance(err, KernelFault):        # e.g. a kernel that does not load (missing symbol)
        return Outcome("failed", f"{type(err).__name__}: {err}", src)
    # QEMU 7.2 aborts translating RVV conversions with a static rounding mode (vfcvt.rtz.*), which
    # LLVM emits for every vectorised float-to-integer cast: an emulator defect, counted apart.
    status = "emulator_abort" if QEMU_RTZ_ABORT in str(err) else "failed"
    return Outcome(status, f"KernelFault: {err}", src)


def make_output(r: Run) -> Buffer:
    sink, sizes = r.program.sink, r.layout.sizes
    if sink.kind == "store":
        count = sizes[0] * (sizes[1] if len(sizes) > 1 else 1)
        return Buffer(sink.dtype, np.broadcast_to(sentinel(sink.dtype), (count,)).copy())
    r.initial = random_values(r.rng("out"), sink.dtype, sink.slots)
    if sink.dtype.is_float:
        r.initial = np.where(np.isfinite(r.initial), r.initial, 1.0)     # NaN slots would decide nothing
    return Buffer(sink.dtype, r.initial)


def check(r: Run, out: Buffer, src: str) -> Outcome:
    program = r.program
    ev = Evaluator(r.env, r.layout.blocks, r.layout.grid, r.slice_of)
    if program.sink.kind == "store":
        ref = store_reference(r, ev)
        got = out.contents().reshape(np.shape(ref.value))
    else:
        # Through an unsigned pointer the slots hold unsigned values, stored bit for bit as signed ones.
        ref = atomic_reference(r, ev, r.initial)
        got = out.contents().astype(ref.dtype.numpy)
    problems = [d for d in [differences(got, ref)] if d]
    if not out.margins_intact():
        problems.append("the kernel wrote outside its output")
    for buffer, before in r.buffers:
        if not torch.equal(buffer.full.view(-1).view(torch.uint8), before.view(-1).view(torch.uint8)):
            problems.append("the kernel wrote into an input")
            break
    if problems:
        return Outcome("mismatch", "\n".join(problems), src)
    return Outcome("passed", "", src)


# ------------------------------------------------------------------------------------------ locating

def first_divergence(program: K.Program):
    """The first node (children before parents) whose value, stored on its own, already disagrees with
    the reference, and that outcome; or None. Values inside a loop body are skipped (they depend on the
    iteration)."""
    in_loops = {id(n) for loop in program.leaves_and_nodes() if isinstance(loop, T.Loop)
                for n in T.walk(loop.body)}
    full = (True,) * program.layout.rank
    for node in T.walk(program.root):
        if isinstance(node, (T.Leaf, T.Const)) or id(node) in in_loops:
            continue
        dt = node.dtype if node.dtype.torch is not None else D.signed_twin(node.dtype)
        root = T.Broadcast(dt, full, x=T.cast(node, dt, bitcast=dt != node.dtype))
        outcome = run(K.Program(program.layout, root, K.Sink("store", dt), program.data_seed))
        if outcome.status not in ("passed", "rejected"):
            return node, outcome
    return None
