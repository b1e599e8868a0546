"""Counts of a JUnit XML report (pytest --junitxml): `python -m tests.conformance.summary REPORT [LABEL]`
prints one line: label, passed, failed, skipped, expected failures, and the seconds the file took."""
from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import Counter


def outcome(case) -> str:
    if case.find("failure") is not None or case.find("error") is not None:
        return "failed"
    skipped = case.find("skipped")
    if skipped is not None:
        return "xfailed" if skipped.get("type") == "pytest.xfail" else "skipped"
    return "passed"


def summarize(path: str) -> tuple[Counter, float]:
    root = ET.parse(path).getroot()
    counts = Counter(outcome(case) for case in root.iter("testcase"))
    seconds = sum(float(suite.get("time", 0)) for suite in root.iter("testsuite"))
    return counts, seconds


def main(argv) -> int:
    path, label = argv[1], (argv[2] if len(argv) > 2 else argv[1])
    counts, seconds = summarize(path)
    ran = counts["passed"] + counts["failed"]
    share = f"{100 * counts['passed'] / ran:.1f} %" if ran else "-"
    print(f"{label:28} passed {counts['passed']:5}  failed {counts['failed']:4}  skipped {counts['skipped']:4}  "
          f"known failures {counts['xfailed']:4}  pass rate {share:>7}  {seconds:7.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
