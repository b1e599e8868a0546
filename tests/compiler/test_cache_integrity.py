"""Damaged cache entries are detected and rebuilt, never loaded; concurrent compiles and launches from
several processes and threads all compute correctly."""
import glob
import os
import subprocess
import sys
import threading

import torch
import triton

from tests.kernels import add_kernel, softmax_kernel

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _launch(n=100):
    x = torch.rand(n)
    out = torch.empty(n)
    triton.jit(add_kernel.fn)[(1,)](x, x, out, n, BLOCK=128)  # a fresh JIT function: only the disk cache
    torch.testing.assert_close(out, 2 * x)


def _damage(path: str, how: str) -> None:
    with open(path, "r+b") as f:
        if how == "truncate":
            f.truncate(os.path.getsize(path) // 2)
        else:
            f.seek(os.path.getsize(path) // 2)
            f.write(b"\xff" * 16)


def _one(pattern: str) -> str:
    found = glob.glob(pattern, recursive=True)
    assert len(found) == 1, found
    return found[0]


def test_damaged_kernel_entries_are_compiled_again(target, fresh_cache, compile_count):
    _launch()
    for name, how in (("add_kernel.so", "truncate"), ("add_kernel.so", "overwrite"), ("add_kernel.json", "truncate"),
                      ("__grp__add_kernel.json", "overwrite"), ("add_kernel.llir", "overwrite")):
        before = len(compile_count)
        _damage(_one(f"{fresh_cache}/**/{name}"), how)
        _launch()
        assert len(compile_count) == before + 1, f"damaged {name} ({how}) was not rebuilt"
        _launch()
        assert len(compile_count) == before + 1, "the rebuilt entry is used from then on"


def test_a_damaged_copy_of_a_kernel_is_replaced_before_loading(target, fresh_cache):
    """The copy the loader opens (named by the binary's digest) is checked against the binary. Damaged here
    before any process loads it (a block size no other test of this process uses): a loaded library's file is only ever
    replaced whole, never changed in place."""
    import hashlib
    from spine.cache import cache_dir
    x = torch.rand(100)
    out = torch.empty(100)
    kernel = triton.jit(add_kernel.fn)
    compiled = kernel.warmup(x, x, out, 100, BLOCK=8, grid=(13,))
    digest = hashlib.sha256(compiled.kernel).hexdigest()[:24]
    copy = os.path.join(cache_dir(), "kernels", f"add_kernel-{digest}.so")
    os.makedirs(os.path.dirname(copy), exist_ok=True)
    if os.path.exists(copy):
        os.unlink(copy)  # left by an earlier run; replaced, not rewritten in place
    with open(copy, "wb") as f:
        f.write(compiled.kernel[:len(compiled.kernel) // 2])
    kernel[(13,)](x, x, out, 100, BLOCK=8)
    torch.testing.assert_close(out, 2 * x)
    with open(copy, "rb") as f:
        assert f.read() == compiled.kernel


def _child(code: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=ROOT, **env))


LAUNCH_IN_CHILD = """
import torch, triton
from spine.driver import CPUDriver
from tests.kernels import add_kernel
triton.runtime.driver.set_active(CPUDriver(target="{target}"))
x = torch.rand(1000); out = torch.empty(1000)
triton.jit(add_kernel.fn)[(8,)](x, x, out, 1000, BLOCK={block})
assert torch.equal(out, x + x)
print("ok")
"""


def test_damaged_runtime_builds_and_symbol_memo_are_rebuilt(target, tmp_path):
    """Each in a fresh process, since builds are memoised per process."""
    from spine.cache import cache_dir
    from spine.driver.toolchain import guest_kernel_server, host_runtime_library
    from spine.zig import compiler_rt_archive
    spine_cache = cache_dir()
    arch = "riscv64" if target == "riscv64" else os.uname().machine
    damaged = [guest_kernel_server() if target == "riscv64" else host_runtime_library(), compiler_rt_archive(arch)]
    damaged += glob.glob(os.path.join(spine_cache, "symbols", "*.json"))
    env = dict(TRITON_CACHE_DIR=str(tmp_path / "triton"), SPINE_CACHE_DIR=spine_cache)
    for path in damaged:
        _damage(path, "overwrite")
        proc = _child(LAUNCH_IN_CHILD.format(target=target, block=128), **env)
        assert proc.returncode == 0 and "ok" in proc.stdout, f"after damaging {path}:\n{proc.stderr[-3000:]}"


def test_two_processes_compiling_one_kernel_at_once(target, tmp_path):
    from spine.cache import cache_dir
    env = dict(TRITON_CACHE_DIR=str(tmp_path / "shared-cache"), SPINE_CACHE_DIR=cache_dir())
    code = LAUNCH_IN_CHILD.format(target=target, block=256)
    children = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT, **env)) for _ in range(2)]
    for child in children:
        out, err = child.communicate(timeout=300)
        assert child.returncode == 0 and "ok" in out, err[-3000:]


def test_launches_from_several_threads_at_once(target):
    errors = []

    def worker(seed):
        try:
            g = torch.Generator().manual_seed(seed)
            for i in range(10):
                n = 50 + 37 * seed + i
                x = torch.rand(n, generator=g)
                out = torch.empty(n)
                add_kernel[(triton.cdiv(n, 64),)](x, x, out, n, BLOCK=64)
                torch.testing.assert_close(out, 2 * x)
                m = torch.randn(3 + seed, 50, generator=g)
                sm = torch.empty_like(m)
                softmax_kernel[(m.shape[0],)](sm, m, 50, 50, 50, BLOCK=64)
                torch.testing.assert_close(sm, torch.softmax(m, dim=1), rtol=1e-5, atol=1e-6)
        except Exception as err:  # noqa: BLE001
            errors.append(err)
    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
