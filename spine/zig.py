"""zig (shipped by the ziglang wheel) as Spine's C compiler, archiver and linker, and the cache of what
it builds: each product is built once per key, and verified by a digest kept beside it, so a truncated
or corrupted build is rebuilt instead of being handed to the loader."""
from __future__ import annotations

import os
import subprocess
import tempfile
from typing import Callable

from .cache import atomic_write_text, cache_dir, file_digest, private_directory, temporary_file_in, trusted_file


def zig_env() -> dict:
    """zig's objects are linked into what Spine loads, so its caches are checked like Spine's own. Without
    ZIG_LOCAL_CACHE_DIR zig would use the .zig-cache beside any build.zig above the working directory."""
    env = dict(os.environ)
    default = os.path.join(cache_dir(), "zig")
    for name in ("ZIG_GLOBAL_CACHE_DIR", "ZIG_LOCAL_CACHE_DIR"):
        env[name] = private_directory(env.get(name) or default, f"set {name}")
    return env


def zig_binary() -> str:
    """The zig executable inside the ziglang wheel; called directly, since `python -m ziglang` costs an
    interpreter start on every link."""
    import ziglang
    return os.path.join(os.path.dirname(ziglang.__file__), "zig")


def zig(*args: str) -> None:
    cmd = [zig_binary(), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=zig_env())
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr}")


# path → (mtime, size) of builds verified by this process: digests are checked once, not on every link.
_verified: dict = {}


def cached_build(name: str, build: Callable[[str], None]) -> str:
    """The path of `name` in the build cache, running build(path) first when it is missing or does not
    match its digest. Builds write a temporary file that replaces the old one whole (atomic)."""
    out = os.path.join(cache_dir(), "runtime", name)
    digest_path = out + ".sha256"
    try:
        stamp = (os.stat(out).st_mtime_ns, os.stat(out).st_size)
        if _verified.get(out) == stamp:
            return out
        with open(digest_path) as f:
            if trusted_file(out) and trusted_file(digest_path) and f.read().strip() == file_digest(out):
                _verified[out] = stamp
                return out
    except OSError:
        pass
    os.makedirs(os.path.dirname(out), mode=0o700, exist_ok=True)   # removed since cache_dir() made it
    fd, tmp = temporary_file_in(os.path.dirname(out))
    os.close(fd)
    try:
        build(tmp)
        os.chmod(tmp, 0o755)
        digest = file_digest(tmp)
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    atomic_write_text(digest_path, digest)
    return out


def _zig_lib_dir() -> str:
    import ziglang
    return os.path.join(os.path.dirname(ziglang.__file__), "lib")


def compiler_rt_archive(arch: str) -> str:
    """LLVM's soft-float and wide-integer helpers (__extendhfsf2, __truncdfbf2, __divti3, ...), which
    LLVM calls where the target has no instruction, as zig's compiler-rt built for the baseline of `arch`.
    One function per section in an archive, so a kernel links in only the few helpers it calls."""
    def build(path: str) -> None:
        with tempfile.TemporaryDirectory(prefix="spine-crt-") as tmp:
            obj = os.path.join(tmp, "compiler_rt.o")
            zig("build-obj", "-ffunction-sections", "-fPIC", "-fstrip", "-OReleaseFast", "-target",
                f"{arch}-linux-gnu", os.path.join(_zig_lib_dir(), "compiler_rt.zig"), f"-femit-bin={obj}")
            os.unlink(path)
            zig("ar", "rcs", path, obj)
    from importlib.metadata import version
    return cached_build(f"compiler-rt-{arch}-{version('ziglang')}.a", build)
