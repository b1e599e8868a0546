"""Where Spine keeps files between runs, and how it writes them (atomically)."""
from __future__ import annotations

import os
import tempfile


def cache_dir() -> str:
    """Spine's own cache (runtime builds, symbol tables), beside triton's kernel cache."""
    root = os.environ.get("SPINE_CACHE_DIR") or os.path.join(
        os.environ.get("TRITON_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".triton", "cache"), "spine")
    os.makedirs(root, exist_ok=True)
    return root


def atomic_write_bytes(path: str, data: bytes) -> None:
    """Write via a temporary file and rename, so readers never see a partial file."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str, text: str) -> None:
    atomic_write_bytes(path, text.encode())
