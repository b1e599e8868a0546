"""Writes each stage's artifact under SPINE_TRITON_DUMP_PATH, named <kernel>.<stage>."""
from __future__ import annotations

import os

from ..cache import atomic_write_bytes


def dump_artifact(dump_path: str, kernel: str, stage: str, artifact) -> None:
    if not dump_path:
        return
    data = artifact if isinstance(artifact, bytes) else str(artifact).encode()
    atomic_write_bytes(os.path.join(dump_path, f"{kernel}.{stage}"), data)
