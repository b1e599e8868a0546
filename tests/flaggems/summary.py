"""Per-file counts of a FlagGems run (spine_flaggems.py's --results lines):
`python -m tests.flaggems.summary RESULTS [--eager EAGER] [--failures] [--slowest N]` prints one line per
test file (passed, failed, skipped, seconds), the totals with the pass rate of the cases that ran, and with
--failures every failing case and its message.

With --eager (the same cases run by `--eager`: no FlagGems kernels, no Spine), a failure that fails there
too is FlagGems' own (its test or its use of torch fails on eager torch on this machine, CUDA-only cases
among them) and is counted apart, with its eager message as the evidence (so is a failure raised in
FlagGems' Python before the case called any kernel, one Triton's binding refuses, and an accuracy failure
whose reference test_evidence.py shows to be the wrong one); the pass rate is also given without them.
`--failed-ids` prints the failing cases' node ids, one per line."""
from __future__ import annotations

import argparse
import json
import os
from collections import Counter, defaultdict


# Failures inside FlagGems' own code that torch itself refuses on this machine, whatever runs the kernels;
# tests/flaggems/test_evidence.py shows eager torch doing so.
TORCH_REFUSES = {
    "Cannot access accelerator device when none is available":
        "FlagGems pins host memory (Tensor.pin_memory), which torch refuses without an accelerator",
    "'Tensor' object has no attribute 'names'":
        "FlagGems' median reads Tensor.names; torch 2.13 (Spine's pin) has no named tensors",
}


# Failures of a kernel call that Triton's own argument binding refuses, before any backend sees it: FlagGems
# calls its kernel without constexpr arguments the kernel declares (its SpacemiT vendor's heuristics table
# lacks them: bmm's DIVISIBLE_M and DIVISIBLE_N, upsample_nearest2d's USE_INT32_IDX). The same on every
# backend; tests/flaggems/test_evidence.py shows both halves.
CALLER_ERRORS = {
    "dynamic_func() missing": "FlagGems calls its kernel without arguments the kernel declares (its SpacemiT "
                              "heuristics table lacks them); Triton's binding refuses the call on any backend",
}


# A torch operator's schema refusing the arguments FlagGems' own Python passes it, raised outside Triton's and
# Spine's code (no frame of theirs in the traceback): FlagGems' non-CUDA fallbacks of
# _upsample_nearest_exact2d/3d pass scales as lists where the operator takes floats. The same whatever runs
# the kernels; tests/flaggems/test_evidence.py calls the fallback on CPU tensors.
SCHEMA_REFUSAL = "Overloaded torch operator invoked from Python failed to match any schema"


# Accuracy failures whose reference is the test's error, not the kernel's: test_rwkv_mm_sparsity compares
# with torch's own float32 product (FlagGems' SpacemiT vendor declares no fp64, so the test's upcast stops at
# float32), which misses the tolerance the test asks against the exact float64 product, while FlagGems'
# kernel on Spine meets it. tests/flaggems/test_evidence.py shows both halves. Node id prefix: evidence.
REFERENCE_ERRORS = {
    "tests/test_rwkv_mm_sparsity.py::test_rwkv_mmsparsity[":
        "the test's float32 reference misses its own tolerance against the exact product; the kernel meets it",
}
NOT_CLOSE = "Tensor-likes are not close"


# Failures whose message says the op or the test needs CUDA: FlagGems' CUDA-only paths (checked before any
# kernel runs) and tests that build CUDA tensors. Not a CPU backend's to pass; counted apart as such.
NEEDS_CUDA = ("Torch not compiled with CUDA enabled", "must be CUDA tensors", "requires CUDA tensor",
              "Expected a cuda device", "must be on CUDA device", "Could not run 'aten::cudnn",
              "Could not run 'aten::miopen", "Could not run 'aten::_flash_attention", "Could not run 'aten::_thnn",
              "Could not run 'aten::_conv_depthwise", "only supports CUDA", "currently supports float32 CUDA")


def read(path: str) -> list:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def _same_failure_without_spine(case: dict, evidence: dict) -> bool:
    """Whether the eager run failed the same way (the same exception type), and not in Spine: no launch,
    no compile, no argument check of Spine's."""
    message = evidence["message"]
    if evidence["outcome"] != "failed" or "spine" in message.lower() or "kernel '" in message:
        return False
    return message.split(":")[0] == case["message"].split(":")[0]


def before_any_kernel(case: dict) -> bool:
    """Whether a failure happened in FlagGems' own Python before the case called any Triton kernel: no
    kernel call (so no result of Spine's was read) and no frame of Triton's or Spine's in its traceback
    (so no Spine API it called either). Cases recorded before these fields existed never are."""
    return case.get("kernel_calls") == 0 and case.get("triton_frame") == ""


def classify(cases: list, eager: dict) -> None:
    """Marks as "cuda" each failure that says it needs CUDA (NEEDS_CUDA), as "flaggems" each one torch
    refuses here (TORCH_REFUSES), that Triton's binding refuses (CALLER_ERRORS), that fails in FlagGems'
    Python before any kernel (before_any_kernel), whose torch call's schema refuses FlagGems' arguments
    outside Triton and Spine (SCHEMA_REFUSAL), whose reference is the test's error (REFERENCE_ERRORS) or
    that fails on eager torch too (`eager`: the --eager run's cases by node id), with the evidence."""
    for case in cases:
        if case["outcome"] == "failed" and any(text in case["message"] for text in NEEDS_CUDA):
            case["outcome"], case["evidence"] = "cuda", "the message says it needs CUDA"
            continue
        if case["outcome"] == "failed" and before_any_kernel(case):
            case["outcome"] = "flaggems"
            case["evidence"] = "raised in FlagGems' Python before the case called any Triton kernel"
            continue
        if case["outcome"] == "failed" and SCHEMA_REFUSAL in case["message"] and case.get("triton_frame") == "":
            case["outcome"] = "flaggems"
            case["evidence"] = "a torch operator refuses the arguments FlagGems' Python passes it"
            continue
        wrong_reference = next((why for prefix, why in REFERENCE_ERRORS.items() if case["test"].startswith(prefix)),
                               None)
        if case["outcome"] == "failed" and wrong_reference is not None and NOT_CLOSE in case["message"]:
            case["outcome"], case["evidence"] = "flaggems", wrong_reference
            continue
        refused = next((why for text, why in {**TORCH_REFUSES, **CALLER_ERRORS}.items() if text in case["message"]),
                       None)
        if case["outcome"] == "failed" and refused is not None:
            case["outcome"], case["evidence"] = "flaggems", refused
            continue
        evidence = eager.get(case["test"])
        if case["outcome"] == "failed" and evidence is not None and _same_failure_without_spine(case, evidence):
            case["outcome"] = "flaggems"
            case["evidence"] = evidence["message"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("results")
    parser.add_argument("--failures", action="store_true")
    parser.add_argument("--slowest", type=int, default=0)
    parser.add_argument("--eager", default="")
    parser.add_argument("--failed-ids", action="store_true")
    args = parser.parse_args()
    cases = read(args.results)
    if args.failed_ids:
        print("\n".join(sorted({c["test"] for c in cases if c["outcome"] == "failed"})))
        return
    eager = {}
    if args.eager and os.path.exists(args.eager):
        eager = {c["test"]: c for c in read(args.eager)}
    classify(cases, eager)
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
              f"  FlagGems' own {counts['flaggems']:4}  needs CUDA {counts['cuda']:4}  {seconds[file]:7.1f} s")
    ran = total["passed"] + total["failed"] + total["flaggems"] + total["cuda"]
    rate = f"{100 * total['passed'] / ran:.2f} %" if ran else "-"
    cpu = total["passed"] + total["failed"]
    cpu_rate = f"{100 * total['passed'] / cpu:.2f} %" if cpu else "-"
    print(f"{'total':60} passed {total['passed']:5}  failed {total['failed']:4}  skipped {total['skipped']:4}"
          f"  FlagGems' own {total['flaggems']:4}  needs CUDA {total['cuda']:4}  {sum(seconds.values()):7.1f} s")
    print(f"pass rate {rate} of the {ran} cases that ran; {cpu_rate} of the {cpu} a CPU can run (FlagGems' own "
          f"failures, each with its evidence, and those that need CUDA left out)")
    if args.slowest:
        print("slowest files:")
        for file, s in seconds.most_common(args.slowest):
            print(f"  {file:58} {s:7.1f} s")
    if args.failures:
        for case in cases:
            if case["outcome"] == "failed":
                print(f"FAILED {case['test']}: {case['message']}")
        for case in cases:
            if case["outcome"] in ("flaggems", "cuda"):
                print(f"{case['outcome'].upper()} {case['test']}: {case['message']} | {case['evidence']}")


if __name__ == "__main__":
    main()
