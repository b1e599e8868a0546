"""What tests/flaggems/summary.py counts as FlagGems' own failures without an eager rerun: torch refusing,
on this machine, what FlagGems' code asks of it, with no kernel or Spine involved."""
import pytest
import torch

from tests.flaggems.summary import TORCH_REFUSES


@pytest.mark.skipif(torch.accelerator.is_available(), reason="this machine has an accelerator")
def test_torch_refuses_to_pin_memory_without_an_accelerator():
    message = next(text for text in TORCH_REFUSES if "accelerator" in text)
    with pytest.raises(RuntimeError, match=message):
        torch.tensor([1, 2, 3]).pin_memory()   # FlagGems' broadcast_to, argsort, ... on a CPU tensor


def test_torch_has_no_named_tensors():
    assert any("names" in text for text in TORCH_REFUSES)
    with pytest.raises(AttributeError, match="'Tensor' object has no attribute 'names'"):
        torch.randn(3).names                   # FlagGems' median


def test_triton_refuses_a_call_without_a_declared_constexpr():
    """The binding of a call's arguments is Triton's own (JITFunction's dynamic_func), before any backend
    compiles: a kernel called without a constexpr it declares is refused with CALLER_ERRORS' message."""
    import triton
    import triton.language as tl

    from tests.flaggems.summary import CALLER_ERRORS

    @triton.jit
    def kernel(x_ptr, DIVISIBLE_M: tl.constexpr):
        tl.store(x_ptr, DIVISIBLE_M)
    message = next(iter(CALLER_ERRORS))
    with pytest.raises(TypeError, match=message.replace("(", r"\(").replace(")", r"\)")):
        kernel[(1,)](torch.zeros(1))


FLAGGEMS_TABLES = """
import importlib
from flag_gems.runtime.backend._spacemit.heuristics_config_utils import HEURISTICS_CONFIGS

def arg_names(kernel):
    while not hasattr(kernel, "arg_names"):      # through heuristics and libentry to the JITFunction
        kernel = kernel.fn
    return kernel.arg_names

declared = {op: arg_names(getattr(importlib.import_module(f"flag_gems.ops.{op}"), f"{op}_kernel"))
            for op in ("bmm", "upsample_nearest2d")}
for op, names in (("bmm", ("DIVISIBLE_M", "DIVISIBLE_N")), ("upsample_nearest2d", ("USE_INT32_IDX",))):
    for name in names:
        assert name in declared[op] and name not in HEURISTICS_CONFIGS[op], (op, name)
print("ok")
"""

FLAGGEMS_FALLBACKS = """
import torch
from flag_gems.ops._upsample_nearest_exact2d import _launch_upsample_nearest_exact2d_kernel
from flag_gems.ops._upsample_nearest_exact3d import _launch_upsample_nearest_exact3d_kernel
from tests.flaggems.summary import SCHEMA_REFUSAL
for launch, dims in ((_launch_upsample_nearest_exact2d_kernel, 2), (_launch_upsample_nearest_exact3d_kernel, 3)):
    x, out = torch.randn((1, 1) + (4,) * dims), torch.empty((1, 1) + (8,) * dims)
    try:
        launch(x, out, scale=(None,) * dims)     # as FlagGems' op passes an output size with no scales
    except RuntimeError as err:
        assert SCHEMA_REFUSAL in str(err), err
    else:
        raise AssertionError("FlagGems' fallback ran")
print("ok")
"""

FLAGGEMS_FP32_REFERENCE = """
import torch
import triton
import flag_gems
from flag_gems.testing import assert_close
from spine.driver import CPUDriver
triton.runtime.driver.set_active(CPUDriver(target="host"))
# the vendor says it has no fp64: accuracy_utils.to_reference(x, True) then upcasts to float32, not float64
assert flag_gems.runtime.device.support_fp64 is False
torch.manual_seed(0)
k = torch.relu(torch.randn(16384))            # test_rwkv_mm_sparsity's shapes and inputs, float32
v = torch.randn(16384, 4096)
exact = k.double() @ v.double()
try:
    assert_close(k @ v, exact, torch.float32, atol=1e-4)    # the test's reference, as it computes it
except AssertionError:
    pass
else:
    raise AssertionError("torch's float32 product met the tolerance")
assert_close(flag_gems.rwkv_mm_sparsity(k, v), exact, torch.float32, atol=1e-4)   # the kernel, on Spine
print("ok")
"""


def _in_flaggems(script: str) -> None:
    """Runs `script` in a fresh process with FlagGems' SpacemiT vendor (importing FlagGems activates it)."""
    import importlib.util
    import os
    import subprocess
    import sys
    if importlib.util.find_spec("flag_gems") is None:
        pytest.skip("FlagGems is not installed: scripts/setup.sh installs it from ../shared/conformance")
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, GEMS_VENDOR="spacemit", SPINE_TARGET="host", PYTHONPATH=repo)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd="/tmp",
                          timeout=600)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-3000:]


def test_flaggems_cpu_fallbacks_pass_scales_torch_refuses():
    """FlagGems' _upsample_nearest_exact2d/3d fall back to torch's operator off CUDA, passing each scale as
    a list ([None]) where the operator takes a float: torch refuses, before any kernel (SCHEMA_REFUSAL)."""
    _in_flaggems(FLAGGEMS_FALLBACKS)


def test_flaggems_spacemit_heuristics_lack_what_its_kernels_declare():
    """FlagGems' SpacemiT vendor supplies bmm's and upsample_nearest2d's constexpr arguments from its
    heuristics table, which lacks these; the kernels declare them (read from FlagGems, used in place)."""
    _in_flaggems(FLAGGEMS_TABLES)


def test_flaggems_rwkv_reference_is_less_accurate_than_its_tolerance():
    """test_rwkv_mm_sparsity's float32 reference is torch's own float32 product (the SpacemiT vendor
    declares no fp64, so the test's upcast stops at float32), which misses the float32 tolerance the test
    asks against the exact float64 product; FlagGems' kernel on Spine meets it."""
    _in_flaggems(FLAGGEMS_FP32_REFERENCE)


def test_summary_counts_the_rwkv_accuracy_failure_as_flaggems_own_and_nothing_else():
    from tests.flaggems.summary import classify
    rwkv = "tests/test_rwkv_mm_sparsity.py::test_rwkv_mmsparsity[dtype0]"
    cases = [{"test": rwkv, "outcome": "failed", "message": "AssertionError: Tensor-likes are not close!"},
             {"test": rwkv, "outcome": "failed", "message": "spine.errors.KernelFault: kernel 'k' faulted"},
             {"test": "tests/test_mm.py::test_mm[dtype0]", "outcome": "failed",
              "message": "AssertionError: Tensor-likes are not close!"}]
    classify(cases, {})
    assert [c["outcome"] for c in cases] == ["flaggems", "failed", "failed"]
    assert "reference" in cases[0]["evidence"]
