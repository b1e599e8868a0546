"""Whole-process guest instruction counts under QEMU, at QEMU's own speed: a TCG plugin
(bench/qemu_insn_count.c) on Debian's QEMU 7.2, whose user-mode emulator loads plugins (the backported
QEMU 10 that runs Spine's tests is built without them).

    argv, env = counting_command(["prog", "arg"], out_prefix)   # run it; then
    instructions(out_prefix)                                      # the guest instructions it executed

QEMU 7.2 is fetched once with `apt-get download` (the machine's Debian sources, as scripts/setup.sh uses)
and unpacked under Spine's cache directory, with the two libraries it needs that QEMU 10 does not; nothing
is installed. spine.count counts single kernel launches from QEMU's execution log; this counts whole
programs (a model's load, prefill and decode), where that log is far too slow. Both count retired guest
instructions: `check` runs one program under both and compares."""
from __future__ import annotations

import glob
import os
import subprocess
import sys
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

from spine.cache import cache_dir  # noqa: E402

QEMU_PACKAGES = ("qemu-user=1:7.2+dfsg-7+deb12u18+b3", "libcapstone4", "liburing2")
PLUGIN_SOURCE = os.path.join(HERE, "qemu_insn_count.c")
# QEMU 7.2 spells its CPU properties with capitals where 10 does not, and has no zvfh (its vector fp16 runs
# with Zfh): Spine's default riscv64 code and llama.cpp's RVV build run on it.
CPU = "rv64,v=true,vlen=256,elen=64,vext_spec=v1.0,Zfh=true,zba=true,zbb=true,zbs=true"


def root() -> str:
    path = os.path.join(cache_dir(), "qemu-7.2")
    os.makedirs(path, exist_ok=True)
    return path


def qemu() -> tuple[str, dict]:
    """The QEMU 7.2 riscv64 user-mode emulator and the environment it runs in (its libraries)."""
    unpacked = os.path.join(root(), "unpacked")
    binary = os.path.join(unpacked, "usr", "bin", "qemu-riscv64")
    if not os.path.exists(binary):
        downloads = os.path.join(root(), "debs")
        os.makedirs(downloads, exist_ok=True)
        subprocess.run(["apt-get", "download", *QEMU_PACKAGES], cwd=downloads, check=True, capture_output=True)
        staging = unpacked + ".partial"
        for deb in glob.glob(os.path.join(downloads, "*.deb")):
            subprocess.run(["dpkg", "-x", deb, staging], check=True)
        os.replace(staging, unpacked)
    libraries = os.path.join(unpacked, "usr", "lib", "x86_64-linux-gnu")
    return binary, dict(os.environ, LD_LIBRARY_PATH=libraries)


def plugin() -> str:
    """The counting plugin, built with the machine's C compiler when its source changed."""
    with open(PLUGIN_SOURCE, "rb") as f:
        source = f.read()
    import hashlib
    path = os.path.join(root(), f"qemu_insn_count-{hashlib.sha256(source).hexdigest()[:16]}.so")
    if not os.path.exists(path):
        subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", path + ".tmp", PLUGIN_SOURCE], check=True)
        os.replace(path + ".tmp", path)
    return path


def counting_command(argv: list, out_prefix: str, cpu: str = CPU, skip: list = (),
                     words: bool = False) -> tuple[list, dict]:
    """(argv, environment) that run the guest program `argv` under QEMU 7.2 with the counter, which writes
    out_prefix.<pid> as each QEMU process exits; `skip`: (start, end) guest address ranges whose code is not
    counted, nor a signal handler's return (written to out_prefix.skip for the plugin); `words`: also the
    instructions' words and how often each ran (word_counts)."""
    binary, env = qemu()
    options = f"{plugin()},out={out_prefix}" + (",words=1" if words else "")
    if skip:
        with open(out_prefix + ".skip", "w") as f:
            f.writelines(f"{start:x} {end:x}\n" for start, end in skip)
        options += f",skip={out_prefix}.skip"
    return [binary, "-cpu", cpu, "-plugin", options, *argv], env


def wrapper(out_prefix: str, cpu: str = CPU) -> str:
    """A script that runs its arguments as QEMU 7.2 with the counter would (SPINE_QEMU for Spine's kernel
    server, whose command line already names the CPU: `cpu` is for the caller's SPINE_QEMU_CPU)."""
    binary, env = qemu()
    path = out_prefix + ".qemu"
    with open(path, "w") as f:
        f.write(f"#!/bin/sh\nLD_LIBRARY_PATH={env['LD_LIBRARY_PATH']} exec {binary} "
                f"-plugin {plugin()},out={out_prefix} \"$@\"\n")
    os.chmod(path, 0o755)
    return path


def instructions(out_prefix: str) -> int:
    """The instructions of every process counted under out_prefix."""
    total = 0
    for path in glob.glob(glob.escape(out_prefix) + ".*"):
        if path.rsplit(".", 1)[1].isdigit():   # not the wrapper, not a count still being written
            with open(path) as f:
                total += int(f.read())
    return total


def word_counts(out_prefix: str) -> Counter:
    """Instruction word -> times executed, over every process counted under out_prefix with `words`."""
    counts = Counter()
    for path in glob.glob(glob.escape(out_prefix) + ".*.words"):
        with open(path) as f:
            for line in f:
                times, *words = (int(x, 16) for x in line.split())
                for word in words:
                    counts[word] += times
    return counts


CHECK_PROGRAM = r"""
#include <stdlib.h>
int main(int argc, char **argv) {
    volatile long sum = 0;
    for (long i = 0; i < atol(argv[1]); i++) sum += i * i;
    return (int)(sum & 1);
}
"""


def check(loops=(1000, 3000)) -> list:
    """One static guest program (a loop run `loops` times) counted by this plugin on QEMU 7.2 and by QEMU
    10's execution log (one instruction per block, as spine.count logs): [(loops, plugin, log)]. The two
    differ by a constant (the program's last few instructions, which the log shows and the plugin, counting
    at the end of translation blocks that never finish, does not); their differences agree exactly."""
    import tempfile
    from spine.zig import zig_binary
    rows = []
    with tempfile.TemporaryDirectory(prefix="spine-plugin-check-") as tmp:
        source, program = os.path.join(tmp, "loop.c"), os.path.join(tmp, "loop")
        with open(source, "w") as f:
            f.write(CHECK_PROGRAM)
        subprocess.run([zig_binary(), "cc", "-target", "riscv64-linux-musl", "-static", "-O1", source, "-o", program],
                       check=True, capture_output=True)
        for n in loops:
            prefix = os.path.join(tmp, f"count-{n}")
            argv, env = counting_command([program, str(n)], prefix)
            subprocess.run(argv, env=env)
            log = os.path.join(tmp, f"log-{n}")
            subprocess.run(["qemu-riscv64", "-one-insn-per-tb", "-d", "exec,nochain", "-D", log, program, str(n)])
            with open(log, "rb") as f:
                logged = sum(1 for line in f if line.startswith(b"Trace"))
            rows.append((n, instructions(prefix), logged))
    return rows


if __name__ == "__main__":
    for n, counted, logged in check():
        print(f"loop of {n}: plugin {counted}, execution log {logged}")
