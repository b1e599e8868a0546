"""Cache directories that someone else could write to are refused (what they hold is loaded and run);
those Spine creates are 0o700; each is checked once per process."""
import os
import pwd
import stat
import subprocess
import sys

import pytest
import torch
import triton

from spine import cache
from spine.cache import UnsafeCacheDirectory, private_directory
from tests.kernels import add_kernel

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory to another user needs root")
NOBODY = pwd.getpwnam("nobody")


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_created_directories_are_private(tmp_path, monkeypatch):
    monkeypatch.setenv("SPINE_CACHE_DIR", str(tmp_path / "new" / "spine"))
    os.umask(old := os.umask(0))   # the widest umask: the mode must not come from it
    try:
        root = cache.cache_dir()
    finally:
        os.umask(old)
    for path in (tmp_path / "new", root, *(os.path.join(root, s) for s in (*cache.CACHE_SUBDIRECTORIES, "zig"))):
        assert _mode(path) == 0o700, path


@as_root
def test_a_group_writable_directory_is_refused(tmp_path, monkeypatch):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chown(shared, -1, NOBODY.pw_gid)   # a group with another member: nobody
    shared.chmod(0o770)
    monkeypatch.setenv("SPINE_CACHE_DIR", str(shared))
    with pytest.raises(UnsafeCacheDirectory) as refused:
        cache.cache_dir()
    message = str(refused.value)
    assert f"refusing cache directory {shared}: it is writable by others than its owner" in message
    assert "group nogroup" in message and "mode drwxrwx--- (770)" in message
    assert f"chmod go-w {shared}" in message and "set SPINE_CACHE_DIR" in message
    shared.chmod(0o750)   # the fix the message names; the refusal was not remembered
    assert cache.cache_dir() == str(shared)


def test_a_world_writable_directory_is_refused_even_when_sticky(tmp_path):
    for mode in (0o777, 0o1777):
        shared = tmp_path / f"shared-{mode:o}"
        shared.mkdir()
        shared.chmod(mode)
        with pytest.raises(UnsafeCacheDirectory, match="writable by others than its owner"):
            private_directory(str(shared))


@as_root
def test_a_directory_owned_by_someone_else_is_refused(tmp_path, monkeypatch):
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, NOBODY.pw_uid, NOBODY.pw_gid)
    monkeypatch.setenv("SPINE_CACHE_DIR", str(theirs))
    with pytest.raises(UnsafeCacheDirectory, match=r"it is owned by nobody \(uid 65534\), not by"):
        cache.cache_dir()


def test_under_a_sticky_shared_directory_our_own_directory_is_fine(tmp_path):
    shared = tmp_path / "tmp-like"
    shared.mkdir()
    shared.chmod(0o1777)
    ours = private_directory(str(shared / "cache"))
    assert _mode(ours) == 0o700


def test_under_a_shared_directory_without_sticky_bit_nothing_is_safe(tmp_path):
    shared = tmp_path / "open"
    shared.mkdir()
    (shared / "cache").mkdir(mode=0o700)
    shared.chmod(0o777)   # anyone can rename our directory away and put theirs in its place
    with pytest.raises(UnsafeCacheDirectory, match=f"{shared} above it is writable by others and not sticky"):
        private_directory(str(shared / "cache"))


@as_root
def test_a_symbolic_link_someone_else_owns_is_refused(tmp_path):
    ours = tmp_path / "ours"
    ours.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(ours)
    os.lchown(link, NOBODY.pw_uid, NOBODY.pw_gid)   # they could point it elsewhere at any time
    with pytest.raises(UnsafeCacheDirectory, match=f"{link} above it is owned by nobody"):
        private_directory(str(link / "cache"))


def test_triton_kernel_cache_is_checked_before_a_compile(target, tmp_path, monkeypatch):
    shared = tmp_path / "triton-cache"
    shared.mkdir()
    shared.chmod(0o777)
    monkeypatch.setenv("SPINE_CACHE_DIR", cache.cache_dir())   # Spine's own builds stay where they are
    monkeypatch.setenv("TRITON_CACHE_DIR", str(shared))
    x = torch.rand(16)
    with pytest.raises(UnsafeCacheDirectory, match=f"refusing cache directory {shared}/.*set TRITON_CACHE_DIR"):
        triton.jit(add_kernel.fn)[(1,)](x, x, x, 16, BLOCK=16)
    shared.chmod(0o755)
    out = torch.empty(16)
    triton.jit(add_kernel.fn)[(1,)](x, x, out, 16, BLOCK=16)
    torch.testing.assert_close(out, 2 * x)
    entries = [e for e in shared.iterdir() if e.is_dir()]
    assert entries and all(_mode(e) == 0o700 for e in entries)


def test_zig_cache_directories_named_by_the_user_are_checked(tmp_path, monkeypatch):
    from spine.zig import zig_env
    shared = tmp_path / "zig-cache"
    shared.mkdir()
    shared.chmod(0o777)
    for name in ("ZIG_GLOBAL_CACHE_DIR", "ZIG_LOCAL_CACHE_DIR"):
        monkeypatch.setenv(name, str(shared))
        with pytest.raises(UnsafeCacheDirectory, match=f"set {name}"):
            zig_env()
        monkeypatch.delenv(name)
    env = zig_env()   # by default both are Spine's own
    assert env["ZIG_GLOBAL_CACHE_DIR"] == env["ZIG_LOCAL_CACHE_DIR"] == os.path.join(cache.cache_dir(), "zig")


@as_root
def test_a_build_someone_else_wrote_is_built_again(tmp_path, monkeypatch):
    """What a directory that was open to others may still hold, after it was fixed."""
    from spine import zig
    monkeypatch.setenv("SPINE_CACHE_DIR", str(tmp_path / "spine"))
    builds = []

    def build(path):
        builds.append(path)
        with open(path, "wb") as f:
            f.write(b"built")
    out = zig.cached_build("thing", build)
    for planted in (out, out + ".sha256"):
        os.chown(planted, NOBODY.pw_uid, NOBODY.pw_gid)
        zig._verified.clear()
        assert zig.cached_build("thing", build) == out
        assert os.stat(out).st_uid == os.stat(out + ".sha256").st_uid == os.geteuid()
    assert len(builds) == 3


def test_each_directory_is_checked_once_per_process(tmp_path):
    ours = str(tmp_path / "ours")
    private_directory(ours)
    os.chmod(ours, 0o777)   # later changes are not seen by this process (the next one refuses)
    assert private_directory(ours) == ours
    code = f"from spine.cache import private_directory; private_directory({ours!r})"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "UnsafeCacheDirectory: refusing cache directory" in proc.stderr


def test_a_group_of_one_member_may_write(monkeypatch):
    """A umask of 002 with a group per user (Debian, Ubuntu) makes group-writable directories that only
    their owner can write to; a group that anyone else is in, or has as their own, is another matter."""
    import grp
    from types import SimpleNamespace as Entry
    me = Entry(pw_name="me", pw_uid=os.geteuid(), pw_gid=1000)
    users = [me, Entry(pw_name="other", pw_uid=os.geteuid() + 1, pw_gid=1001)]
    groups = {1000: Entry(gr_mem=[]), 1001: Entry(gr_mem=[]), 1002: Entry(gr_mem=["me", "other"]),
              1003: Entry(gr_mem=["me"])}
    monkeypatch.setattr(pwd, "getpwuid", lambda uid: me)
    monkeypatch.setattr(pwd, "getpwall", lambda: users)
    monkeypatch.setattr(grp, "getgrgid", lambda gid: groups[gid])
    cache._group_of_one.cache_clear()
    try:
        assert [cache._group_of_one(gid) for gid in (1000, 1001, 1002, 1003)] == [True, False, False, True]
    finally:
        cache._group_of_one.cache_clear()
