"""Where Spine keeps files between runs, and how it writes them (atomically)."""
from __future__ import annotations

import os
import tempfile


def cache_dir() -> str:
    """Spine's own cache (runtime builds, symbol tables), beside triton's kernel cache."""
    from triton import knobs
    from . import switches
    root = switches.CACHE_DIR.get() or os.path.join(knobs.cache.dir, "spine")
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
