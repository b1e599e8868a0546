"""Cases of Triton's language tests that fail on Spine for a known reason, each with its cause. The plugin
(plugin.py) marks them xfail(strict=False, reason=cause): a known failure that starts passing shows as
XPASS, and a failure not listed here stays a failure.

Groups:
    frontend   the test uses a language feature or frontend behaviour newer than the triton 3.6 wheel Spine
               runs on (the tests come from a later triton-cpu fork); it fails the same way under triton's own
               interpreter (TRITON_INTERPRET=1), so it is not the backend's
    fork       the test asserts a limitation of the triton-cpu fork's CPU backend that Spine does not have
    gpu        the test needs a GPU (calls CUDA directly)
    qemu       riscv64 only: QEMU 7.2 user mode (Debian 12's) aborts translating an RVV instruction LLVM emits;
               the code is valid RVV and runs on hardware and newer QEMU
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
    # ---- fork: asserts the triton-cpu fork's own behaviour
    KnownFailure(r"test_conversions\.py::test_typeconvert_upcast\[float8e4b(8|15)-.*\]",
                 "on CPU the test expects a CompilationError 'not supported in this architecture' for fp8e4b8 and "
                 "fp8e4b15 (the fork's CPU backend rejects them); Spine supports both formats and converts them",
                 "fork"),
    KnownFailure(r"test_tuple\.py::test_passing_nested_tuple_with_constexpr_and_jit_hook",
                 "clears triton's kernel cache under torch.cpu.current_device() ('cpu'), while triton keys it by the "
                 "driver's device, which Spine derives from the target and compile switches: a kernel compiled by an "
                 "earlier test stays cached, the jit hook is not called (the test passes when run alone)", "fork"),
    # ---- gpu
    KnownFailure(r"test_tensor_descriptor\.py::test_tensor_descriptor_batched_gemm_3d_tma",
                 "calls torch.cuda.synchronize() after the kernel ('Torch not compiled with CUDA enabled')", "gpu"),
    # ---- qemu: riscv64 under QEMU 7.2 only
    KnownFailure(r"test_core\.py::test_cast\[\d+-(float16|float32|float64)-u?int(8|16|32)-False-\d+\]",
                 "QEMU 7.2 aborts ('decode_save_opc: Assertion ctx->insn_start != NULL') translating the RVV "
                 "float-to-integer conversions with a static round-toward-zero mode (vfcvt.rtz.x.f.v, "
                 "vfcvt.rtz.xu.f.v, vfncvt.rtz.*) that LLVM emits for every vectorised fptosi/fptoui",
                 "qemu", targets=("riscv64", )),
    # ---- spine: ours, not fixed yet
    KnownFailure(r"test_core\.py::test_where\[\d+-\*int32\]",
                 "pointers made from integers (tt.int_to_ptr) and tl.where between pointers into different "
                 "arguments are not supported by the conversion", "spine"),
    KnownFailure(r"test_tensor_descriptor\.py::test_mxfp8_mxfp4_matmul_tma\[.*\]",
                 "tl.dot_scaled (tt.dot_scaled: microscaled fp8/fp4 operands with e8m0 scales) is not supported "
                 "by the conversion", "spine"),
)


def known_failure(test_id: str, target: str):
    """The entry that explains a failing case, or None."""
    for entry in KNOWN_FAILURES:
        if entry.matches(test_id, target):
            return entry
    return None
