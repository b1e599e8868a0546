"""Counts of a JUnit XML report (pytest --junitxml): `python -m tests.conformance.summary REPORT [LABEL]`
prints one line: label, passed, failed, skipped, known failures (xfail from known_failures.py), the tests'
own expected failures (pytest.xfail they call themselves, e.g. "NYI in CPU backend"), the pass rate of
the cases that ran (passed / (passed + failed), and again counting known failures as failed), and the
seconds the file took. `--failures` also lists every failing case and each known failure's group.
`--total REPORT...` prints one line of the sums over several reports."""
from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import Counter


def outcome(case) -> str:
    if case.find("failure") is not None or case.find("error") is not None:
        return "failed"
    skipped = case.find("skipped")
    if skipped is not None:
        if skipped.get("type") != "pytest.xfail":
            return "skipped"
        # known_failures.py reasons start with their group in brackets
        return "known" if skipped.get("message", "").startswith("[") else "xfailed"
    return "passed"


def case_id(case) -> str:
    return f"{case.get('classname', '').rsplit('.', 1)[-1]}.py::{case.get('name')}"


def summarize(path: str) -> tuple[Counter, float]:
    root = ET.parse(path).getroot()
    counts = Counter(outcome(case) for case in root.iter("testcase"))
    seconds = sum(float(suite.get("time", 0)) for suite in root.iter("testsuite"))
    return counts, seconds


def failures(path: str) -> list[str]:
    lines = []
    for case in ET.parse(path).getroot().iter("testcase"):
        kind = outcome(case)
        if kind == "failed":
            element = case.find("failure") if case.find("failure") is not None else case.find("error")
            lines.append(f"FAILED {case_id(case)}: {(element.get('message') or '').splitlines()[0][:160]}")
        elif kind == "known":
            lines.append(f"known  {case_id(case)}: {case.find('skipped').get('message', '')[:60]}")
    return lines


def line(label: str, counts: Counter, seconds: float) -> str:
    ran = counts["passed"] + counts["failed"]
    share = f"{100 * counts['passed'] / ran:.1f} %" if ran else "-"
    ran_all = ran + counts["known"]
    share_all = f"{100 * counts['passed'] / ran_all:.1f} %" if ran_all else "-"
    return (f"{label:28} passed {counts['passed']:5}  failed {counts['failed']:4}  skipped {counts['skipped']:4}  "
            f"known failures {counts['known']:4}  own xfail {counts['xfailed']:4}  pass rate {share:>7} "
            f"({share_all:>7} counting known failures)  {seconds:7.0f} s")


def main(argv) -> int:
    if argv[1] == "--total":
        total, seconds = Counter(), 0.0
        for path in argv[2:]:
            counts, took = summarize(path)
            total.update(counts)
            seconds += took
        print(line("total", total, seconds))
        return 0
    args = [a for a in argv[1:] if a != "--failures"]
    path, label = args[0], (args[1] if len(args) > 1 else args[0])
    counts, seconds = summarize(path)
    print(line(label, counts, seconds))
    if "--failures" in argv:
        for failure in failures(path):
            print("   ", failure)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
