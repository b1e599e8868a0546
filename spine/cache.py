"""Where Spine keeps files between runs, and how it writes them (atomically).

What these caches hold is loaded and run (kernels, the runtime, the launcher), so whoever can write a cache
directory can run code in every process that uses it. Every cache directory is therefore checked before
use, once per process: it must be ours and writable by nobody else; the directories above it must be ours
or root's, and may be writable by others only with the sticky bit (/tmp), under which no one can rename
away what we own. Directories Spine creates are 0o700."""
from __future__ import annotations

import functools
import json
import os
import stat
import tempfile


class UnsafeCacheDirectory(RuntimeError):
    """A cache directory that someone else could write to."""


def cache_dir() -> str:
    """Spine's own cache (runtime builds, symbol tables), beside triton's kernel cache."""
    from triton import knobs
    from . import switches
    chosen = switches.CACHE_DIR.get()
    root = chosen or os.path.join(knobs.cache.dir, "spine")
    where = f"set {switches.CACHE_DIR.name}" if chosen else f"set {switches.CACHE_DIR.name} or TRITON_CACHE_DIR"
    private_directory(root, where)
    for sub in (*CACHE_SUBDIRECTORIES, "zig"):
        private_directory(os.path.join(root, sub), where)
    _reap_once(root)
    return root


def private_directory(path: str, where: str = "choose another directory") -> str:
    """`path`, created (0o700, with any missing parents) if missing, after checking that nobody but us (and
    root) can write to it or replace it. `where` says how the user picks another directory."""
    return _checked_directory(os.path.abspath(path), where)


@functools.lru_cache(maxsize=None)   # a refusal raises, so it is not remembered: fixing the mode helps at once
def _checked_directory(path: str, where: str) -> str:
    _make_private(path)
    real = os.path.realpath(path)
    _check_own(path, real, where)
    # Above it as named and as resolved: a symbolic link on the way is followed on every open.
    for directory in sorted(_above(path) | _above(real)):
        _check_above(path, directory, where)
    return path


def _above(path: str) -> set:
    parents = set()
    while os.path.dirname(path) != path:
        path = os.path.dirname(path)
        parents.add(path)
    return parents


def _make_private(path: str) -> None:
    missing = []
    while not os.path.isdir(path) and os.path.dirname(path) != path:
        missing.append(path)
        path = os.path.dirname(path)
    for directory in reversed(missing):
        try:
            os.mkdir(directory, 0o700)
        except FileExistsError:   # made by another process meanwhile: checked like any other
            continue
        os.chmod(directory, 0o700)   # whatever the umask


def _check_own(path: str, real: str, where: str) -> None:
    st = os.stat(real)
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafeCacheDirectory(f"cache directory {path}: not a directory; {where} to another directory")
    problem = None
    if st.st_uid != os.geteuid():
        problem = f"owned by {_user(st.st_uid)}, not by {_user(os.geteuid())}"
    elif _writable_by_others(st):
        problem = "writable by others than its owner"
    if problem:
        raise UnsafeCacheDirectory(
            f"refusing cache directory {path}{_resolved(path, real)}: it is {problem} ({_describe(st)}), and "
            f"whoever can write to it can plant code that Spine loads and runs. If it is yours, run "
            f"`chmod go-w {real}`; otherwise {where} to a directory of your own")


def _check_above(path: str, directory: str, where: str) -> None:
    """A directory above the cache (or a symbolic link on the way): whoever can rename entries in it, or
    point the link elsewhere, can swap the cache for their own."""
    st = os.lstat(directory)
    problem = None
    if st.st_uid not in (os.geteuid(), 0):
        problem = f"owned by {_user(st.st_uid)}"
    elif not stat.S_ISLNK(st.st_mode) and _writable_by_others(st) and not st.st_mode & stat.S_ISVTX:
        problem = "writable by others and not sticky"
    if problem:
        raise UnsafeCacheDirectory(
            f"refusing cache directory {path}: {directory} above it is {problem} ({_describe(st)}), so "
            f"someone else can replace the cache with code that Spine loads and runs. Run "
            f"`chmod go-w {directory}` (or `chmod +t` for a shared directory like /tmp) if it is yours; "
            f"otherwise {where} to a directory of your own")


def _writable_by_others(st: os.stat_result) -> bool:
    return bool(st.st_mode & stat.S_IWOTH) or (bool(st.st_mode & stat.S_IWGRP) and not _group_of_one(st.st_gid))


@functools.lru_cache(maxsize=None)
def _group_of_one(gid: int) -> bool:
    """A group whose only member is the current user (the per-user groups behind a umask of 002)."""
    import grp
    import pwd
    try:
        group, me = grp.getgrgid(gid), pwd.getpwuid(os.geteuid())
    except KeyError:
        return False
    if any(member != me.pw_name for member in group.gr_mem):
        return False
    if me.pw_gid != gid and me.pw_name not in group.gr_mem:
        return False
    return all(user.pw_gid != gid or user.pw_uid == me.pw_uid for user in pwd.getpwall())


def _user(uid: int) -> str:
    import pwd
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _describe(st: os.stat_result) -> str:
    import grp
    try:
        group = grp.getgrgid(st.st_gid).gr_name
    except KeyError:
        group = str(st.st_gid)
    return f"owner {_user(st.st_uid)}, group {group}, mode {stat.filemode(st.st_mode)} ({st.st_mode & 0o7777:o})"


def _resolved(path: str, real: str) -> str:
    return f" (= {real})" if real != path else ""


def trusted_file(path: str) -> bool:
    """Whether a file in a checked cache directory is one that only we could have written (a directory that
    was open to others before it was fixed may still hold what they left)."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    return st.st_uid == os.geteuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


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
    from triton import knobs
    from triton.runtime.cache import FileCacheManager

    class VerifiedFileCacheManager(FileCacheManager):
        def __init__(self, key, override=False, dump=False):
            if not (override or dump) and knobs.cache.dir:   # the compile cache, which kernels are loaded from
                private_directory(os.path.join(knobs.cache.dir, key), "set TRITON_CACHE_DIR")
            super().__init__(key, override, dump)

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
