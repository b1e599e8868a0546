"""Per-file counts of a FlagGems run (spine_flaggems.py's --results lines):
`python -m tests.flaggems.summary RESULTS [--failures] [--slowest N]` prints one line per test file (passed,
failed, skipped, seconds), the totals with the pass rate of the cases that ran, and with --failures every
failing case and its message."""
from __future__ import annotations

import argparse
import json
from collections import Counter, defaultdict


def read(path: str) -> list:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("results")
    parser.add_argument("--failures", action="store_true")
    parser.add_argument("--slowest", type=int, default=0)
    args = parser.parse_args()
    cases = read(args.results)
    by_file = defaultdict(Counter)
    seconds = Counter()
    for case in cases:
        by_file[case["file"]][case["outcome"]] += 1
        seconds[case["file"]] += case["seconds"]
    total = Counter()
    for file in sorted(by_file):
        counts = by_file[file]
        total.update(counts)
        print(f"{file:60} passed {counts['passed']:5}  failed {counts['failed']:4}  skipped {counts['skipped']:4}"
              f"  {seconds[file]:7.1f} s")
    ran = total["passed"] + total["failed"]
    rate = f"{100 * total['passed'] / ran:.2f} %" if ran else "-"
    print(f"{'total':60} passed {total['passed']:5}  failed {total['failed']:4}  skipped {total['skipped']:4}"
          f"  {sum(seconds.values()):7.1f} s  pass rate {rate} of {ran} cases that ran")
    if args.slowest:
        print("slowest files:")
        for file, s in seconds.most_common(args.slowest):
            print(f"  {file:58} {s:7.1f} s")
    if args.failures:
        for case in cases:
            if case["outcome"] == "failed":
                print(f"FAILED {case['test']}: {case['message']}")


if __name__ == "__main__":
    main()
