"""Triton's own tutorials (../shared/conformance/triton-tutorials, unmodified) run to their end on Spine
with the one line a CPU needs, checks and benchmarks included (the sweeps cut to their first point:
run_tutorial.py). Each runs in a process of its own, as a newcomer runs it.

Under QEMU too: 01 to 05, at the tutorials' own sizes (03 autotunes a 512^3 fp16 product over its
configurations: about a minute in emulation). 05 stops, as written, at its fp16 check against torch's own
CPU backward, which is off by more than the check allows: layer_norm_reference.py shows that against
float64. 06's checks are a pytest function, test_op, which attention_check.py calls on both targets; 07
asserts CUDA tensors. 08 runs here on the host only: its check multiplies four fp16 groups of up to 1024^3,
sizes fixed in the script, three minutes under QEMU (where it also passes: bench/RESULTS.md); the tables
of addresses it reads are tested on both targets in tests/ops/test_pointer_tables.py."""
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TUTORIALS = os.path.join(ROOT, "..", "shared", "conformance", "triton-tutorials")

needs_tutorials = pytest.mark.skipif(not os.path.isdir(TUTORIALS), reason=f"{TUTORIALS} is not on this machine")
# triton-cpu's own CPU tutorials (python/tutorials of a triton-lang/triton-cpu checkout), run as written: they
# are not among the conformance material beside the project, so they run where a checkout is named
TRITON_CPU_TUTORIALS = os.environ.get("SPINE_TRITON_CPU_TUTORIALS", "")


# 08's second benchmark multiplies M x 8192 x 8192 fp16 matrices in four groups, sizes fixed inside its
# function: minutes per point on a CPU, for torch as for Spine.
SKIPPED_PLOTS = "group-gemm-performance-m-8192-k-8192"


def _run(script: str, tutorial: str, tmp_path, *args, directory: str = TUTORIALS, **env_vars) -> str:
    env = dict(os.environ, TUTORIAL_OUTPUT=str(tmp_path), PYTHONPATH=os.pathsep.join([ROOT, HERE]),
               TUTORIAL_SKIP_PLOTS=SKIPPED_PLOTS, **env_vars)
    done = subprocess.run([sys.executable, os.path.join(HERE, script), os.path.join(directory, tutorial), *args],
                          capture_output=True, text=True, env=env, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    return done.stdout


@needs_tutorials
@pytest.mark.parametrize("tutorial,target,expected", [
    ("01-vector-add.py", "host", "The maximum difference between torch and triton is 0.0"),
    ("02-fused-softmax.py", "host", "softmax-performance"),
    ("03-matrix-multiplication.py", "host", "Triton and Torch match"),
    ("04-low-memory-dropout.py", "host", "output (seed = 512)"),
    ("08-grouped-gemm.py", "host", "group-gemm-performance"),
    ("01-vector-add.py", "riscv64", "The maximum difference between torch and triton is 0.0"),
    ("02-fused-softmax.py", "riscv64", "softmax-performance"),
    ("03-matrix-multiplication.py", "riscv64", "Triton and Torch match"),
    ("04-low-memory-dropout.py", "riscv64", "output (seed = 512)"),
])
def test_a_tutorial_runs_to_its_end(tutorial, target, expected, tmp_path):
    out = _run("run_tutorial.py", tutorial, tmp_path, target)
    assert expected in out, out[-2000:]
    if "03" in tutorial:
        assert "✅ Triton and Torch match" in out and "❌" not in out


@needs_tutorials
@pytest.mark.parametrize("target", ["host", "riscv64"])
def test_the_layer_norm_tutorial_is_right_against_float64(target, tmp_path):
    out = _run("layer_norm_reference.py", "05-layer-norm.py", tmp_path, target)
    assert "spine against float64" in out and "layer-norm-backward" in out, out[-2000:]


@pytest.mark.skipif(not os.path.isdir(TRITON_CPU_TUTORIALS),
                    reason="SPINE_TRITON_CPU_TUTORIALS names no triton-cpu python/tutorials directory")
@pytest.mark.parametrize("tutorial,expected", [
    ("02-fused-softmax-cpu.py", "softmax-performance"),
    ("03-matrix-multiplication-cpu.py", "✅ TritonCPU and TorchCPU match"),
    ("matrix-vector-multiplication.py", "✅ TritonCPU and TorchCPU match"),
    ("matrix-vector-multiplication-bf16.py", "✅ TritonCPU and TorchCPU match"),
    ("cpu-blocked-matmul.py", "✅ TritonCPU pre-packed and TorchCPU match"),
    ("cpu-sfc-matmul.py", "✅ TritonCPU pre-packed SFC and TorchCPU match"),
])
def test_a_triton_cpu_tutorial_runs_as_written(tutorial, expected, tmp_path):
    """Not even the one line: they call triton.runtime.driver.set_active_to_cpu() themselves, launch with
    num_cpu_threads= / num_threads= / assume_in_bounds= and time with do_bench(measure_time_with_hooks=...)."""
    out = _run("run_tutorial.py", tutorial, tmp_path, "host", directory=TRITON_CPU_TUTORIALS,
               TUTORIAL_AS_WRITTEN="1")
    assert expected in out and "❌" not in out, out[-2000:]


@needs_tutorials
@pytest.mark.parametrize("target", ["host", "riscv64"])
def test_the_fused_attention_tutorials_own_check(target, tmp_path):
    """06's test_op, backward (which checks the forward too; its fp16 forward case skips itself for that
    reason), causal, at the smallest of its own sizes: Z 1, H 2, N_CTX 128, HEAD_DIM 64."""
    out = _run("attention_check.py", "06-fused-attention.py", tmp_path, target, "bwd", "causal", "triton-fp16")
    assert "test_op bwd causal=True triton-fp16: passed" in out, out[-2000:]
