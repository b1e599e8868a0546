"""Compiles the test suite's representative kernels (tests/compiler/test_cpus.py) for every CPU users have
and prints, per CPU, how many compiled as asked and how many needed a safer codegen configuration.

    .venv/bin/python bench/compile_for_cpus.py
"""
from __future__ import annotations

import dataclasses
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import triton  # noqa: E402

from spine.compiler.pipeline import build_from_linalg  # noqa: E402
from spine.driver import CPUDriver  # noqa: E402
from spine.kernel_facts import METADATA_KEY, KernelFacts  # noqa: E402
from spine.options import CPUOptions  # noqa: E402
from tests.compiler.test_cpus import RISCV_CPUS, X86_CPUS, _compile_all  # noqa: E402


def codegen(compiled, cpu: str, features: str) -> tuple[int, list[str]]:
    fallbacks = []
    for name, kernel in compiled:
        md = kernel.metadata
        options = dataclasses.replace(CPUOptions(), triple=md.triple, cpu=cpu, features=features)
        metadata = {"name": md.name, METADATA_KEY: md.spine}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            build_from_linalg(kernel.asm["linalg"], metadata, options)
        codegen = KernelFacts.from_metadata(metadata).codegen
        if codegen != f"cpu={cpu}":
            fallbacks.append(f"{name}: {codegen}")
    return len(compiled), fallbacks


def main() -> None:
    print("| target | CPU | features | kernels | compiled as asked | fell back (kernel: what ran) | seconds |")
    print("|---|---|---|---|---|---|---|")
    for target, cpus in (("host", [(c, "") for c in X86_CPUS]), ("riscv64", RISCV_CPUS)):
        triton.runtime.driver.set_active(CPUDriver(target=target))
        compiled = _compile_all()
        for cpu, features in cpus:
            start = time.perf_counter()
            count, fallbacks = codegen(compiled, cpu, features)
            shown = (features if len(features) < 30 else features[:27] + "...") or "the CPU's own"
            print(f"| {target} | {cpu} | {shown} | {count} | {count - len(fallbacks)} | "
                  f"{'; '.join(fallbacks) or '-'} | {time.perf_counter() - start:.1f} |")


if __name__ == "__main__":
    main()
