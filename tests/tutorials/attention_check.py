"""Runs Triton's fused-attention tutorial's own check, `test_op` (forward or backward, against torch's
attention in fp16), at the smallest of its own sizes, with the one line a CPU needs. The module is run
under its own name rather than as __main__: its benchmark stays out.

    python tests/tutorials/attention_check.py 06-fused-attention.py TARGET MODE CAUSAL PROVIDER

(`test_op` skips fwd for triton-fp16 by design, the backward check runs the forward too; triton-fp8 is its
fp8 forward.)
"""
import runpy
import sys

import run_tutorial


def main() -> None:
    path, target, mode, causal, provider = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "causal", sys.argv[5]
    run_tutorial.prepare(path, target)
    module = runpy.run_path(path, run_name="fused_attention")
    # its parametrize lists' first values: Z 1, H 2, N_CTX 128, HEAD_DIM 64, warp_specialize off (no Blackwell)
    module["test_op"](1, 2, 128, 64, causal, False, mode, provider)
    print(f"test_op {mode} causal={causal} {provider}: passed")


if __name__ == "__main__":
    sys.exit(main())
