"""Named passes and the declared pipelines they form: what the `llir` stage does to a module, in order.

A pass is a name, a one-line summary and a function that rewrites an MLIR module in place; upstream
MLIR pipelines (bufferization, the lowering to loops and to the LLVM dialect) are passes too, wrapped by
`upstream`. A pass may run only when its condition holds on the module it is given (bf16 emulation only
for a module with bf16 values): passes meet only through the IR, never through each other's state.

    run_pipeline(module, LLIR_PIPELINE, choices, dump=...)   the stage itself (compiler/lower.py)
    python -m spine.compiler.lower list                      the pipeline, a pass a line
    python -m spine.compiler.lower run NAME < in.mlir        one pass alone, on IR text, like mlir-opt

With SPINE_DUMP_PASSES=<dir>, a compile writes the module after every pass that changed it as
`<kernel>.<NN>-<pass>.mlir` (NN its place in the pipeline), and `<kernel>.passes.txt`, the list of passes with
what each did (`changed`, `unchanged`, `skipped`: its condition did not hold)."""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Callable


def _always(module, choices) -> bool:
    return True


@dataclass(frozen=True)
class Pass:
    name: str
    summary: str
    rewrite: Callable          # rewrite(module, choices): edits the module in place
    when: Callable = _always   # when(module, choices): whether the pass runs on this module

    def __str__(self) -> str:
        return self.name


def upstream(pipeline: str) -> Callable:
    """A pass made of upstream MLIR passes, `pipeline` as mlir-opt's --pass-pipeline takes it inside
    builtin.module(...)."""
    def rewrite(module, choices) -> None:
        run_upstream(module, pipeline)
    rewrite.pipeline = pipeline
    return rewrite


def run_upstream(module, pipeline: str) -> None:
    """Runs upstream MLIR passes; their diagnostics become a SpineCompilationError naming source lines."""
    from mlir import ir, passmanager
    from ..errors import SpineCompilationError, describe_location
    try:
        passmanager.PassManager.parse(f"builtin.module({pipeline})").run(module.operation)
    except ir.MLIRError as err:
        lines = []
        for diag in err.error_diagnostics:
            lines.append(f"{describe_location(diag.location)}: {diag.message}")
            lines += [f"  note: {note.message}" for note in diag.notes]
        raise SpineCompilationError("MLIR lowering failed:\n" + "\n".join(lines)) from None


@dataclass
class PassRecord:
    """What each pass of one run did, in order: (name, outcome), the outcome "changed", "unchanged" (when
    dumping), "ran" (when not), "skipped" (its condition did not hold) or what a pass that gave up said."""
    outcomes: list = field(default_factory=list)

    def ran(self, name: str) -> bool:
        """Whether the pass `name` ran (its condition held)."""
        return any(step == name and outcome != "skipped" for step, outcome in self.outcomes)

    def gave_up(self) -> list:
        return [(name, outcome) for name, outcome in self.outcomes if outcome.startswith("gave up")]

    def text(self) -> str:
        return "".join(f"{i:02d} {name}: {outcome}\n" for i, (name, outcome) in enumerate(self.outcomes))


def run_pipeline(module, pipeline, choices, dump: Callable | None = None) -> PassRecord:
    """Runs each pass whose condition holds. `dump(index, name, module_text)` is called after each pass that
    changed the module (the text is compared only when dumping: printing a module costs). A rewrite that
    returns a string (a pass that gave up: "gave up: why") has that recorded as its outcome."""
    record = PassRecord()
    before = str(module) if dump else None
    for index, step in enumerate(pipeline):
        if not step.when(module, choices):
            record.outcomes.append((step.name, "skipped"))
            continue
        note = step.rewrite(module, choices)
        if dump is None:
            record.outcomes.append((step.name, note or "ran"))
            continue
        after = str(module)
        changed = after != before
        record.outcomes.append((step.name, note or ("changed" if changed else "unchanged")))
        if changed:
            dump(index, step.name, after)
        before = after
    return record


def directory_dump(directory: str, kernel: str, suffix: str) -> Callable:
    """A `dump` for run_pipeline that writes each module into `directory` as `<kernel>.<NN>-<pass><suffix>`,
    atomically: a reader never sees half a file."""
    from ..cache import atomic_write_bytes
    os.makedirs(directory, exist_ok=True)

    def dump(index: int, name: str, text: str) -> None:
        path = os.path.join(directory, f"{kernel}.{index:02d}-{name}{suffix}")
        atomic_write_bytes(path, text.encode())
    return dump


def find(pipeline, name: str) -> Pass:
    for step in pipeline:
        if step.name == name:
            return step
    raise KeyError(f"no pass named {name!r}; the passes are: {', '.join(p.name for p in pipeline)}")


def run_one(text: str, step: Pass, choices) -> str:
    """The module `text` after the one pass `step` (its condition ignored: asked for, it runs), verified."""
    from mlir import ir
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        step.rewrite(module, choices)
        module.operation.verify()
        return str(module)


def describe(pipeline) -> str:
    lines = []
    for index, step in enumerate(pipeline):
        inner = getattr(step.rewrite, "pipeline", None)
        condition = "" if step.when is _always else f"  [only {step.when.__doc__.strip()}]"
        lines.append(f"{index:02d} {step.name}: {step.summary}{condition}")
        if inner:
            lines.append(f"     upstream: {inner}")
    return "\n".join(lines)


def main(pipeline, choices_for: Callable, argv=None, prog: str = "") -> int:
    """The command line of a stage's pipeline: `list` its passes, or `run NAME [FILE]` one of them."""
    import argparse
    parser = argparse.ArgumentParser(prog=prog, description="List the passes of a stage, or run one on IR text.")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="the pipeline, in order, a pass a line")
    one = sub.add_parser("run", help="run one pass on an MLIR module read from a file or standard input")
    one.add_argument("name", choices=[p.name for p in pipeline], metavar="NAME")
    one.add_argument("input", nargs="?", help="the module's file (default: standard input)")
    one.add_argument("--target", default="riscv64-unknown-linux-gnu",
                     help="the LLVM triple the lowering's choices follow (default riscv64-unknown-linux-gnu)")
    args = parser.parse_args(argv)
    if args.command == "list":
        print(describe(pipeline))
        return 0
    if args.input:
        with open(args.input) as f:
            text = f.read()
    else:
        text = sys.stdin.read()
    sys.stdout.write(run_one(text, find(pipeline, args.name), choices_for(args.target)))
    return 0
