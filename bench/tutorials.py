"""The tutorials' own benchmark tables on the host: Triton's tutorials (../shared/conformance/triton-tutorials,
with the one line a CPU needs) and, where SPINE_TRITON_CPU_TUTORIALS names a triton-cpu checkout's
python/tutorials, triton-cpu's CPU tutorials as written. Each tutorial prints its table with torch's lines
beside Triton's; this runs each in a process of its own through tests/tutorials/run_tutorial.py, with the
first POINTS points of every sweep and each timing repeated for REP_MS, and prints the tables as Markdown.

    .venv/bin/python bench/tutorials.py [--points 2] [--rep-ms 200] [--only 02-fused-softmax.py ...]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RUNNER = os.path.join(ROOT, "tests", "tutorials", "run_tutorial.py")
TRITON_TUTORIALS = os.path.join(ROOT, "..", "shared", "conformance", "triton-tutorials")
# 04 has no benchmark; 06's autotunes 24 configurations at 4 x 32 heads x 1,024 and more positions per point,
# hours on a few cores (its check, test_op, is in tests/tutorials); 07 asserts CUDA tensors; 08's second
# sweep has GPU sizes fixed inside its function
TRITON = ("01-vector-add.py", "02-fused-softmax.py", "03-matrix-multiplication.py", "05-layer-norm.py",
          "08-grouped-gemm.py")
TRITON_CPU = ("02-fused-softmax-cpu.py", "03-matrix-multiplication-cpu.py", "matrix-vector-multiplication.py",
              "matrix-vector-multiplication-bf16.py", "cpu-blocked-matmul.py")
SKIPPED_PLOTS = "group-gemm-performance-m-8192-k-8192"
# 05 stops at its fp16 check against torch's own CPU backward; this runner judges it against float64 and then
# runs its benchmark (tests/tutorials/layer_norm_reference.py)
RUNNERS = {"05-layer-norm.py": os.path.join(ROOT, "tests", "tutorials", "layer_norm_reference.py")}


def run(path: str, points: int, rep_ms: float, as_written: bool) -> str:
    with tempfile.TemporaryDirectory() as out:
        env = dict(os.environ, TUTORIAL_OUTPUT=out, TUTORIAL_POINTS=str(points), TUTORIAL_REP_MS=str(rep_ms),
                   TUTORIAL_SKIP_PLOTS=SKIPPED_PLOTS, SPINE_TARGET="host", MPLBACKEND="Agg",
                   PYTHONPATH=os.pathsep.join([ROOT, os.path.dirname(RUNNER)]))
        if as_written:
            env["TUTORIAL_AS_WRITTEN"] = "1"
        runner = RUNNERS.get(os.path.basename(path), RUNNER)
        done = subprocess.run([sys.executable, runner, path, "host"], capture_output=True, text=True, env=env)
    if done.returncode:
        return f"failed ({done.returncode}): {done.stderr.strip().splitlines()[-1] if done.stderr else ''}"
    return done.stdout


def tables(output: str) -> list[str]:
    """The `name:` line and the pandas table under it, for each table the tutorial printed."""
    lines, found = output.splitlines(), []
    for i, line in enumerate(lines):
        # pandas' frame: a header line, then rows numbered from 0
        if line.endswith(":") and i + 2 < len(lines) and lines[i + 2].lstrip().startswith("0 "):
            block = [line]
            for row in lines[i + 1:]:
                if not row.strip() or row.endswith(":"):
                    break
                block.append(row)
            found.append("\n".join(block))
    return found


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--points", type=int, default=2)
    parser.add_argument("--rep-ms", type=float, default=200)
    parser.add_argument("--only", nargs="*")
    args = parser.parse_args(argv)
    triton_cpu = os.environ.get("SPINE_TRITON_CPU_TUTORIALS", "")
    jobs = [(os.path.join(TRITON_TUTORIALS, t), False) for t in TRITON]
    if os.path.isdir(triton_cpu):
        jobs += [(os.path.join(triton_cpu, t), True) for t in TRITON_CPU]
    for path, as_written in jobs:
        name = os.path.basename(path)
        if args.only and name not in args.only:
            continue
        output = run(path, args.points, args.rep_ms, as_written)
        found = tables(output) if not output.startswith("failed") else []
        print(f"### {name}{' (triton-cpu, as written)' if as_written else ''}\n")
        print("```\n" + ("\n\n".join(found) if found else output.strip()[-600:] or "no table") + "\n```\n",
              flush=True)


if __name__ == "__main__":
    main()
