"""Differential fuzzing, the long run: random Triton kernels (tests/fuzz) compiled by Spine for one target and
compared with the reference.

    python bench/fuzz.py --target host --count 1000
    python bench/fuzz.py --target riscv64 --count 1000 --seed 7

Prints how many kernels were generated, compiled (and ran), passed, mismatched, rejected with a clean
""unsupported" SpineCompilationError, failed otherwise (compiler crash, kernel fault), made QEMU itself
abort (emulator_abort: QEMU 7.2 cannot translate RVV float-to-integer conversions) or were invalid (the
frontend refused the generated source: a fuzzer bug). The source, details and pickled program of every
kernel that was not passed or rejected go to --save (default $TMPDIR/spine_fuzz_findings/<target>);
`--replay that.pkl` runs one again.
"""
from __future__ import annotations

import argparse
import collections
import os
import pickle
import re
import sys
import tempfile
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

STATUSES = ("passed", "mismatch", "rejected", "failed", "emulator_abort", "invalid")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", choices=("host", "riscv64", "interpreter"), default="host",
                        help="a Spine target, or triton's interpreter (TRITON_INTERPRET=1), which checks the "
                             "reference itself")
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--depth", type=int, default=4, help="maximum expression depth")
    parser.add_argument("--save", default=None, help="directory for the kernels that did not pass")
    parser.add_argument("--replay", default=None, help="run one saved program (.pkl) and print the outcome")
    parser.add_argument("--locate", action="store_true",
                        help="with --replay: also find the first value that disagrees, stored on its own")
    parser.add_argument("--verbose", action="store_true", help="print each kernel's number before it runs")
    parser.add_argument("--shrink", nargs="?", const="", default=None, metavar="TEXT",
                        help="stop at the first kernel that is not passed or rejected (and whose source or details "
                             "contain TEXT) and shrink it to a minimal one")
    args = parser.parse_args()

    if args.target == "interpreter":
        os.environ["TRITON_INTERPRET"] = "1"          # read when triton is imported
    else:
        os.environ["SPINE_TARGET"] = args.target
    import triton
    from hypothesis import HealthCheck, Phase, assume, given, seed, settings

    from spine.driver import CPUDriver
    from tests.fuzz import kernels, runner

    if args.target != "interpreter":
        triton.runtime.driver.set_active(CPUDriver(target=args.target))
    if args.replay:
        program = pickle.loads(Path(args.replay).read_bytes())
        outcome = runner.run(program)
        print(outcome.status, outcome.detail, sep="\n")
        found = runner.first_divergence(program) if args.locate else None
        if found:
            print("\nfirst value that disagrees on its own:", found[1].status, found[1].detail, found[1].source,
                  sep="\n")
        return 0
    save = Path(args.save or Path(tempfile.gettempdir()) / "spine_fuzz_findings" / args.target)
    shrinking = args.shrink is not None
    counts = collections.Counter()
    seen: set = set()
    reasons = collections.Counter()
    started = time.time()

    @seed(args.seed)
    @settings(max_examples=args.count, database=None, deadline=None,
              phases=[Phase.generate] + ([Phase.shrink] if shrinking else []), report_multiple_bugs=False,
              suppress_health_check=list(HealthCheck))
    @given(kernels.programs(max_depth=args.depth, small=args.target == "riscv64"))
    def one(program):
        src = kernels.source(program)
        if not shrinking:                      # hypothesis repeats itself; count distinct kernels only
            assume(src not in seen)
            seen.add(src)
        if args.verbose:
            print(f"kernel {counts['generated'] + 1}", flush=True)
        try:
            outcome = runner.run(program)
        except Exception:                      # a bug of the fuzzer itself, or an unexpected error
            outcome = runner.Outcome("failed", traceback.format_exc(), kernels.source(program))
        counts["generated"] += 1
        counts[outcome.status] += 1
        if outcome.status in ("rejected", "failed", "emulator_abort"):
            reason = outcome.detail.strip().splitlines()[-1].split(" in kernel")[0]
            reason = re.sub(r"\S*/(fuzz_|fuzz_kernel-)\S*", "<kernel>", reason)[:160]   # one line per kind
            reasons[f"{outcome.status}: {reason}"] += 1
        if outcome.status not in ("passed", "rejected"):
            save.mkdir(parents=True, exist_ok=True)
            name = f"{outcome.status}_{counts['generated']:05d}"
            (save / f"{name}.py").write_text(outcome.source)
            (save / f"{name}.txt").write_text(outcome.detail)
            (save / f"{name}.pkl").write_bytes(pickle.dumps(program))
        if shrinking and outcome.status not in ("passed", "rejected", "emulator_abort") and \
                args.shrink in outcome.detail + outcome.source:
            raise AssertionError(f"{outcome.status}: {outcome.detail}\n\n{outcome.source}")
        if counts["generated"] % 50 == 0:
            print(f"  {counts['generated']} kernels, {time.time() - started:.0f} s: {dict(counts)}", flush=True)

    try:
        one()
    except AssertionError as failure:
        print("minimal failing kernel:", str(failure).split("Falsifying example")[0], sep="\n")
        return 1
    counts["compiled"] = counts["passed"] + counts["mismatch"]
    elapsed = time.time() - started
    print(f"target {args.target}, seed {args.seed}, {elapsed:.0f} s")
    for key in ("generated", "compiled") + STATUSES:
        print(f"  {key:10s} {counts[key]}")
    for reason, n in reasons.most_common():
        print(f"  {n}x {reason}")
    if counts["mismatch"] or counts["failed"] or counts["invalid"]:
        print(f"  details in {save}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
