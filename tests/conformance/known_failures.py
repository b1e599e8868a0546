"""Cases of Triton's language tests that fail on Spine for a known reason, each with its cause. The plugin
(plugin.py) marks them xfail(strict=False, reason=cause): a known failure that starts passing shows as
XPASS, and a failure not listed here stays a failure.

Groups:
    frontend   the test uses a language feature or frontend behaviour newer than the triton 3.6 wheel Spine
               runs on (the tests come from a later triton-cpu fork): it fails in triton's own frontend before
               any backend runs. Checked by running each case under triton's interpreter (TRITON_INTERPRET=1,
               November 2026): test_cat[False-*] (14 cases), test_squeeze/test_unsqueeze (6), test_sort with
               topk(descending=) (32) and test_tuple_constexpr_function fail there with the same error;
               test_const[call-False-*] fails there too (the interpreter raises nothing at all); the int16
               test_tma_gather/scatter cases pass there only because the interpreter builds no TTIR
    fork       the test assumes the triton-cpu fork's CPU backend: how it names its device
    gpu        the test needs a GPU (calls CUDA directly)
    spine      Spine's to fix, not fixed yet

A pattern is a regular expression matched against "<file>::<test id>" (e.g. "test_core.py::test_foo[a-b]").
"""
from __future__ import annotations

import re
from dataclasses import dataclass

ALL_TARGETS = ("host", "riscv64")


@dataclass(frozen=True)
class KnownFailure:
    pattern: str
    cause: str
    group: str
    targets: tuple = ALL_TARGETS

    def matches(self, test_id: str, target: str) -> bool:
        return target in self.targets and re.fullmatch(self.pattern, test_id) is not None


KNOWN_FAILURES = (
    # ---- frontend: newer than the triton 3.6 frontend
    KnownFailure(r"test_core\.py::test_cat\[False-.*\]",
                 "tl.cat(..., can_reorder=False): triton 3.6's frontend asserts 'current implementation of `cat` "
                 "always may reorder elements' before any backend runs (also under TRITON_INTERPRET=1)", "frontend"),
    KnownFailure(r"test_core\.py::test_const\[call-False-(True|False)\]",
                 "expects the newer frontend's message 'Return type mismatch'; triton 3.6's code generator raises "
                 "'Inconsistent return types: const_pointer<fp32> and pointer<fp32>' for the same error", "frontend"),
    KnownFailure(r"test_core\.py::test_load_cache_modifier\[\.cs\]",
                 "a load with cache_modifier='.cs': triton 3.6's semantic knows '.cs' only for stores "
                 "(_str_to_load_cache_modifier raises 'Cache modifier .cs not supported' while the frontend "
                 "builds the kernel, before any backend runs)", "frontend"),
    KnownFailure(r"test_standard\.py::test_(squeeze|unsqueeze)\[.*\]",
                 "tl.squeeze / tl.unsqueeze do not exist in triton 3.6 (AttributeError; also under TRITON_INTERPRET=1)",
                 "frontend"),
    KnownFailure(r"test_standard\.py::test_sort\[\w+-(True|False)-8-(1-512|8-64|256-16|512-8)\]",
                 "tl.topk(..., descending=...): triton 3.6's topk has no `descending` argument (TypeError; also "
                 "under TRITON_INTERPRET=1)", "frontend"),
    KnownFailure(r"test_tensor_descriptor\.py::test_tma_(gather|scatter)\[idx_dtype1-.*\]",
                 "int16 row indices: triton 3.6's tt.descriptor_gather/scatter take i32 offsets only, and its "
                 "verifier rejects the TTIR the frontend builds ('operand #1 must be ranked tensor of 32-bit "
                 "signless integer values'); the interpreter, which builds no TTIR, runs it", "frontend"),
    KnownFailure(r"test_tuple\.py::test_tuple_constexpr_function",
                 "a @constexpr_function returning a user tuple type keeps its fields in the newer frontend only; "
                 "triton 3.6 returns a plain tuple ('foo' is not in list; AttributeError under TRITON_INTERPRET=1)",
                 "frontend"),
    # ---- fork: assumes the triton-cpu fork's own behaviour
    KnownFailure(r"test_tuple\.py::test_passing_nested_tuple_with_constexpr_and_jit_hook",
                 "clears triton's kernel cache under torch.cpu.current_device() ('cpu'), while triton keys it by the "
                 "driver's device, which Spine derives from the target and compile switches: a kernel compiled by an "
                 "earlier test stays cached, the jit hook is not called (the test passes when run alone; under "
                 "TRITON_INTERPRET=1 it fails: 'InterpretedFunction' object has no attribute 'device_caches')",
                 "fork"),
    # ---- gpu
    KnownFailure(r"test_tensor_descriptor\.py::test_tensor_descriptor_batched_gemm_3d_tma",
                 "calls torch.cuda.synchronize() after the kernel ('Torch not compiled with CUDA enabled')", "gpu"),
    # ---- spine: ours, not fixed yet
)


def known_failure(test_id: str, target: str):
    """The entry that explains a failing case, or None."""
    for entry in KNOWN_FAILURES:
        if entry.matches(test_id, target):
            return entry
    return None
