"""Where Spine keeps files between runs, and how it writes them (atomically)."""
from __future__ import annotations

import functools
import json
import os
import tempfile


def cache_dir() -> str:
    """Spine's own cache (runtime builds, symbol tables), beside triton's kernel cache."""
    from triton import knobs
    from . import switches
    root = switches.CACHE_DIR.get() or os.path.join(knobs.cache.dir, "spine")
    os.makedirs(root, exist_ok=True)
    _reap_once(root)
    return root


def temporary_file_in(directory: str) -> tuple[int, str]:
    """A temporary file beside the one it will replace, named after this process so that one a killed
    process left behind can be told from one being written."""
    return tempfile.mkstemp(dir=directory, prefix=f"{TEMPORARY_PREFIX}{os.getpid()}-")


TEMPORARY_PREFIX = ".tmp-"
CACHE_SUBDIRECTORIES = ("runtime", "kernels", "symbols")  # what Spine writes under cache_dir()


@functools.lru_cache(maxsize=None)
def _reap_once(root: str) -> None:
    """Remove temporary files whose writer died mid-write (once per cache directory and process)."""
    for sub in CACHE_SUBDIRECTORIES:
        directory = os.path.join(root, sub)
        for name in os.listdir(directory) if os.path.isdir(directory) else ():
            if name.startswith(TEMPORARY_PREFIX) and not _writer_alive(name):
                try:
                    os.unlink(os.path.join(directory, name))
                except OSError:
                    pass


def _writer_alive(name: str) -> bool:
    pid = name[len(TEMPORARY_PREFIX):].split("-", 1)[0]
    if not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def atomic_write_bytes(path: str, data: bytes) -> None:
    """Write via a temporary file and rename, so readers never see a partial file."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = temporary_file_in(os.path.dirname(path))
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


def file_digest(path: str) -> str:
    import hashlib
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


@functools.lru_cache(maxsize=None)
def verified_cache_manager_class():
    """triton's file cache, with a digest of every file of a compiled kernel kept in the kernel's group
    record: an entry whose files were truncated or corrupted reads as a miss (triton then compiles again
    and replaces it), never as a broken binary handed to the loader."""
    from triton.runtime.cache import FileCacheManager

    class VerifiedFileCacheManager(FileCacheManager):
        def put_group(self, filename, group):
            digests = {name: file_digest(path) for name, path in group.items()}
            record = json.dumps({"child_paths": group, "spine_sha256": digests})
            return self.put(record, f"__grp__{filename}", binary=False)

        def get_group(self, filename):
            path = self.get_file(f"__grp__{filename}")
            if path is None:
                return None
            try:
                with open(path) as f:
                    record = json.load(f)
                group, digests = record["child_paths"], record["spine_sha256"]
                if set(group) != set(digests):
                    return None
                for name, child in group.items():
                    if file_digest(child) != digests[name]:
                        return None
            except (OSError, ValueError, KeyError, TypeError, AttributeError):
                return None
            return group

    return VerifiedFileCacheManager


def use_verified_cache() -> None:
    """Make triton's kernel cache verify what it reads, unless the user chose a cache manager of their own."""
    from triton import knobs
    from triton.runtime.cache import FileCacheManager
    if knobs.cache.manager_class in (None, FileCacheManager):
        knobs.cache.manager_class = verified_cache_manager_class()
