"""torch's layer-norm backward at bench/kernel_scaling.py's shapes (tutorial 05's benchmark: 4096 fp16 rows
of 1024 and 1536), on 1, 2, 4, ... threads: the reference for kernel_scaling's two layer-norm rows (dx with
the partial sums, then dw and db; add them) on a machine where only torch is installed.

    python3 bench/torch_layer_norm.py [max_threads | T1,T2,...]

torch's own kernel, `aten.native_layer_norm_backward` (what autograd calls for F.layer_norm), best of
several calls in ms, in kernel_scaling's table format. Like kernel_scaling's launches, the calls follow each
other with the operands left in the caches."""
from __future__ import annotations

import argparse
import os

import torch

from torch_matmul import best_ms, thread_counts     # bench/, on sys.path as the script's own folder


def backward(m: int, n: int):
    x = -2.3 + 0.5 * torch.randn(m, n, dtype=torch.float16)
    weight, bias = torch.rand(n, dtype=torch.float16), torch.rand(n, dtype=torch.float16)
    dy = 0.1 * torch.randn_like(x)
    _, mean, rstd = torch.ops.aten.native_layer_norm(x, [n], weight, bias, 1e-5)
    return lambda: torch.ops.aten.native_layer_norm_backward(dy, x, [n], mean, rstd, weight, bias, [True, True, True])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("threads", nargs="?", default=str(os.cpu_count()))
    args = parser.parse_args()
    counts = thread_counts(args.threads)
    print(f"torch {torch.__version__}, {torch.backends.cpu.get_cpu_capability()}")
    print("| product | threads | ms |\n|---|---|---|")
    for n in (1024, 1536):
        fn = backward(4096, n)
        for threads in counts:
            torch.set_num_threads(threads)
            print(f"| torch layer-norm backward fp16 4096x{n} | {threads} | {best_ms(fn, reps=20):.3f} |", flush=True)


if __name__ == "__main__":
    main()
