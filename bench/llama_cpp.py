"""llama.cpp, the tool K1/K3 owners run LLMs with, built from the `llama-cpp-python==0.3.36` sdist (the
llama.cpp it vendors, with SpacemiT's ports) for the two targets Spine compiles for:

    .venv/bin/python bench/llama_cpp.py host      # cmake + the system compiler, -march=native
    .venv/bin/python bench/llama_cpp.py riscv64   # zig cc, static, rv64gcv (RVV 1.0), run under QEMU

Prints the directory of the binaries (`llama-simple`, `llama-bench`, `llama-tokenize`). The sdist is fetched
with pip and everything is built under Spine's cache directory, once; nothing of llama.cpp is kept in this
repository. bench/llm.py compares against these builds."""
from __future__ import annotations

import argparse
import glob
import os
import subprocess
import sys
import tarfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

from spine.cache import cache_dir  # noqa: E402

SDIST = "llama-cpp-python==0.3.36"
TARGETS = ("llama-simple", "llama-bench", "llama-tokenize")
# the vendored llama.cpp's own options: no network, no server, no tests, no OpenMP (so both builds use
# ggml's own thread pool)
COMMON = ["-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_CURL=OFF", "-DLLAMA_BUILD_SERVER=OFF", "-DLLAMA_BUILD_TESTS=OFF",
          "-DGGML_OPENMP=OFF", "-DLLAMA_OPENSSL=OFF"]


def root() -> str:
    return os.path.join(cache_dir(), "llama.cpp")


def source() -> str:
    """The vendored llama.cpp of the sdist, unpacked once."""
    src = os.path.join(root(), "src")
    tree = os.path.join(src, "vendor", "llama.cpp")
    if os.path.isfile(os.path.join(tree, "CMakeLists.txt")):
        return tree
    download = os.path.join(root(), "sdist")
    os.makedirs(download, exist_ok=True)
    if not glob.glob(os.path.join(download, "*.tar.gz")):
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                        "-d", download, SDIST], check=True)
    archive, = glob.glob(os.path.join(download, "*.tar.gz"))
    partial = src + ".partial"
    with tarfile.open(archive) as tar:
        top = tar.getnames()[0].split("/")[0]
        tar.extractall(partial, filter="data")
    os.replace(os.path.join(partial, top), src)
    os.rmdir(partial)
    return tree


# zig names RISC-V extensions as a CPU and features, not as -march strings: ggml's -march=rv64gcv_zfh_zvfh
# becomes this
ZIG_RISCV_CPU = "-mcpu=generic_rv64+m+a+f+d+c+v+zfh+zvfh"


def _zig_wrappers(directory: str, target: str) -> tuple[str, str]:
    """cmake wants one executable per compiler: `zig cc` and `zig c++` for `target`, as scripts that turn
    -march into zig's -mcpu (and drop -mabi, which the target fixes)."""
    import ziglang
    zig = os.path.join(os.path.dirname(ziglang.__file__), "zig")
    os.makedirs(directory, exist_ok=True)
    paths = []
    for name, verb in (("cc", "cc"), ("c++", "c++")):
        path = os.path.join(directory, f"zig-{name}")
        with open(path, "w") as f:
            f.write("#!/bin/sh\nfor a in \"$@\"; do shift; case \"$a\" in\n"
                    f"  -march=*) set -- \"$@\" {ZIG_RISCV_CPU} ;;\n  -mabi=*) ;;\n  *) set -- \"$@\" \"$a\" ;;\n"
                    f'esac; done\nexec "{zig}" {verb} -target {target} "$@"\n')
        os.chmod(path, 0o755)
        paths.append(path)
    return paths[0], paths[1]


def configure_args(target: str, build: str) -> list:
    if target == "host":
        return COMMON + ["-DGGML_NATIVE=ON"]
    cc, cxx = _zig_wrappers(os.path.join(build, "zig"), "riscv64-linux-musl")
    return COMMON + [
        f"-DCMAKE_C_COMPILER={cc}", f"-DCMAKE_CXX_COMPILER={cxx}", "-DCMAKE_SYSTEM_NAME=Linux",
        "-DCMAKE_SYSTEM_PROCESSOR=riscv64", "-DBUILD_SHARED_LIBS=OFF", "-DGGML_NATIVE=OFF", "-DGGML_RVV=ON",
        "-DGGML_RV_ZFH=ON", "-DGGML_RV_ZVFH=ON", "-DGGML_RV_ZICBOP=OFF", "-DGGML_RV_ZIHINTPAUSE=OFF",
        "-DCMAKE_EXE_LINKER_FLAGS=-static", "-DLLAMA_BUILD_EXAMPLES=ON", "-DLLAMA_BUILD_TOOLS=ON"]


def build(target: str) -> str:
    """Builds llama.cpp's tools for `target` (once) and returns the directory of the binaries."""
    if target not in ("host", "riscv64"):
        raise ValueError(f"target {target!r}: host or riscv64")
    tree = source()
    out = os.path.join(root(), f"build-{target}")
    bin_dir = os.path.join(out, "bin")
    if all(os.path.exists(os.path.join(bin_dir, t)) for t in TARGETS):
        return bin_dir
    env = dict(os.environ, ZIG_GLOBAL_CACHE_DIR=os.path.join(root(), "zig-cache"))
    subprocess.run(["cmake", "-S", tree, "-B", out] + configure_args(target, out), check=True, env=env)
    subprocess.run(["cmake", "--build", out, "-j", str(os.cpu_count() or 2), "--target", *TARGETS], check=True,
                   env=env)
    return bin_dir


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("target", choices=("host", "riscv64"))
    print(build(parser.parse_args(argv).target))


if __name__ == "__main__":
    main()
