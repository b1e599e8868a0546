"""Shared by the examples: pick the target, time launches, print a one-line verdict."""
import os
import time

import torch
import triton

from spine.driver import CPUDriver


def activate() -> str:
    target = os.environ.get("SPINE_TARGET", "riscv64")
    triton.runtime.driver.set_active(CPUDriver(target=target))
    return target


def time_per_launch(launch, repeat: int = 20) -> float:
    launch()  # compile (or load from the cache) first
    start = time.perf_counter()
    for _ in range(repeat):
        launch()
    return (time.perf_counter() - start) / repeat


def report(name: str, target: str, got: torch.Tensor, expected: torch.Tensor, seconds: float, tol: float):
    err = (got.float() - expected.float()).abs().max().item()
    verdict = "OK" if err <= tol else "MISMATCH"
    print(f"{name:<18} target={target:<8} max|err|={err:.3e}  {seconds * 1e6:9.1f} us/launch  {verdict}")
    if verdict != "OK":
        raise SystemExit(1)
