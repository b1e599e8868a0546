"""Deterministic instruction counts of riscv64 kernels under QEMU, for the benchmarks: the counter itself
is `spine.count` (also `python -m spine.count` for one kernel from the command line)."""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from spine.count import count_instructions, count_launch, executed_addresses  # noqa: E402

__all__ = ["count_instructions", "count_launch", "executed_addresses"]
