"""Ahead-of-time kernels: `python -m spine.aot` builds a library and header, and examples/aot's C program
calls it, cross-compiled for riscv64 and run under QEMU, and built for the host."""
import os
import subprocess
import sys

import pytest
import torch

from spine import switches
from spine.aot.signature import SignatureError, kernel_signature
from spine.driver.qemu import GUEST_SYSROOT, qemu_binary
from spine.driver.toolchain import GUEST_ZIG_TARGET
from spine.zig import zig

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "examples", "aot")
ROWS, COLS = 5, 100


def _reference() -> torch.Tensor:
    r = torch.arange(ROWS).view(-1, 1)
    c = torch.arange(COLS).view(1, -1)
    x = ((r * 31 + c * 17) % 23).float() * 0.25 - 2.0
    return torch.softmax(x, dim=1)


def _build(tmp_path, target: str) -> str:
    out = tmp_path / "build"
    proc = subprocess.run([sys.executable, "-m", "spine.aot", f"{EXAMPLE}/softmax.py:softmax_kernel",
                           "--name", "softmax", "--target", target, "--signature", "*fp32,*fp32,i32,i32,i32",
                           "--constexpr", "BLOCK=128", "--out-dir", str(out)],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    program = str(out / "softmax_main")
    zig("cc", *(["-target", GUEST_ZIG_TARGET] if target == "riscv64" else []), "-O2", f"-I{out}",
        os.path.join(EXAMPLE, "softmax_main.c"), f"-L{out}", "-lsoftmax", "-Wl,-rpath,$ORIGIN", "-o", program)
    return program


def _check(stdout: str) -> None:
    got = torch.tensor([float(v) for v in stdout.split()]).view(ROWS, COLS)
    torch.testing.assert_close(got, _reference(), rtol=1e-5, atol=1e-7)


def test_riscv64_program_under_qemu(tmp_path):
    program = _build(tmp_path, "riscv64")
    proc = subprocess.run([qemu_binary(), "-L", GUEST_SYSROOT, "-cpu", switches.QEMU_CPU.get(), program,
                           str(ROWS), str(COLS)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    _check(proc.stdout)


def test_host_program(tmp_path):
    program = _build(tmp_path, "host")
    proc = subprocess.run([program, str(ROWS), str(COLS)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    _check(proc.stdout)
    # The library exports the kernel's three functions and nothing of the runtime inside it.
    from elftools.elf.elffile import ELFFile
    with open(tmp_path / "build" / "libsoftmax.so", "rb") as f:
        elf = ELFFile(f)
        symbols = elf.get_section_by_name(".dynsym")
        exported = {s.name for s in symbols.iter_symbols() if s["st_shndx"] != "SHN_UNDEF"}
        needed = {t.needed for t in elf.get_section_by_name(".dynamic").iter_tags() if t.entry.d_tag == "DT_NEEDED"}
    assert exported == {"softmax", "softmax_set_num_threads", "softmax_last_error"}
    # Nothing of Python or Spine: the C library (and its loader, libm, pthreads) only.
    assert all(n.startswith(("libc.so", "libm.so", "libpthread.so", "ld-linux")) for n in needed), needed


def test_header_declares_the_c_function(tmp_path):
    _build(tmp_path, "host")
    header = (tmp_path / "build" / "softmax.h").read_text()
    assert ("int softmax(float *out_ptr, const float *in_ptr, int32_t in_row_stride, int32_t out_row_stride, "
            "int32_t n_cols, int grid_x, int grid_y, int grid_z);") in header
    assert "BLOCK=128" in header


def _kernel():
    sys.path.insert(0, EXAMPLE)
    try:
        from softmax import softmax_kernel
    finally:
        sys.path.remove(EXAMPLE)
    return softmax_kernel


def test_signature_matches_parameters():
    sig = kernel_signature(_kernel(), "*fp32:16, *fp32, i32, i32, i32", ["BLOCK=128"])
    assert [p.name for p in sig.params] == ["out_ptr", "in_ptr", "in_row_stride", "out_row_stride", "n_cols"]
    assert sig.constexprs == {"BLOCK": 128}
    assert sig.triton_signature["BLOCK"] == "constexpr"
    assert sig.attrs() == {(0,): [["tt.divisibility", 16]]}


@pytest.mark.parametrize("signature, constexprs, message", [
    ("*fp32,*fp32,i32,i32", ["BLOCK=128"], "4 types for 5"),
    ("*fp32,*fp32,i32,i32,i32", [], "--constexpr BLOCK=..."),
    ("*fp32,*fp32,i32,i32,i32", ["BLOCK=128", "WIDTH=2"], "no parameter WIDTH"),
    ("*fp33,*fp32,i32,i32,i32", ["BLOCK=128"], "unknown type 'fp33'"),
    ("*fp32:8,*fp32,i32,i32,i32", ["BLOCK=128"], "the only hint"),
    ("*fp32,*fp32,i32,i32,i32", ["BLOCK"], "NAME=VALUE"),
])
def test_signature_errors(signature, constexprs, message):
    with pytest.raises(SignatureError, match=message.replace(".", r"\.").replace("(", r"\(")):
        kernel_signature(_kernel(), signature, constexprs)


TWO_KERNELS_MAIN = r"""
#include <stdio.h>
#include "kernels.h"
int main(void) {
    float x[300], y[300], sum[300], soft[3 * 100];
    for (int i = 0; i < 300; i++) { x[i] = (float)(i % 7); y[i] = 0.5f * (float)i; }
    vadd_set_num_threads(1);
    if (vadd(x, y, sum, 300, 3, 1, 1) != SPINE_AOT_OK) return 1;
    if (softmax(soft, sum, 100, 100, 100, 3, 1, 1) != SPINE_AOT_OK) return 1;
    if (vadd(x, y, sum, 300, -1, 1, 1) != SPINE_AOT_INVALID_GRID) return 1;
    for (int i = 0; i < 300; i++) printf("%.9g %.9g\n", sum[i], soft[i]);
    return 0;
}
"""


def test_a_library_of_two_kernels(tmp_path):
    out = tmp_path / "build"
    proc = subprocess.run([sys.executable, "-m", "spine.aot", "--target", "host", "--library", "kernels",
                           f"{os.path.dirname(__file__)}/kernels.py:add_kernel", "-s", "*fp32,*fp32,*fp32,i32",
                           "-c", "BLOCK=128", "--name", "vadd",
                           f"{EXAMPLE}/softmax.py:softmax_kernel", "--name", "softmax",
                           "--signature", "*fp32,*fp32,i32,i32,i32", "--constexpr", "BLOCK=128",
                           "--out-dir", str(out)], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    (tmp_path / "main.c").write_text(TWO_KERNELS_MAIN)
    program = str(out / "main")
    zig("cc", "-O2", f"-I{out}", str(tmp_path / "main.c"), f"-L{out}", "-lkernels", "-Wl,-rpath,$ORIGIN",
        "-o", program)
    run = subprocess.run([program], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    got = torch.tensor([[float(v) for v in line.split()] for line in run.stdout.splitlines()])
    i = torch.arange(300)
    expected_sum = (i % 7).float() + 0.5 * i.float()
    torch.testing.assert_close(got[:, 0], expected_sum)
    torch.testing.assert_close(got[:, 1], torch.softmax(expected_sum.view(3, 100), dim=1).flatten())


def test_options_belong_to_the_kernel_before_them():
    from spine.aot.__main__ import split_arguments
    library, kernels = split_arguments(["-s", "i32", "a.py:k", "-c", "B=1", "--target", "host", "b.py:m",
                                        "--signature=*fp32", "-n", "em", "-o", "dir"])
    assert library == ["--target", "host", "-o", "dir"]
    assert [(k.kernel, k.signature, k.constexprs, k.name) for k in kernels] == [
        ("a.py:k", "i32", ["B=1"], None), ("b.py:m", "*fp32", [], "em")]


C_WORDS_MAIN = r"""
#include <stdio.h>
#include "words.h"
int main(void) {
    float a[200], b[200], out[200], more[200];
    for (int i = 0; i < 200; i++) { a[i] = (float)(i % 11); b[i] = 0.25f * (float)i; out[i] = more[i] = -1.0f; }
    /* 150 of the 200 elements (the kernel's "num_threads"), two programs of 128. */
    if (c_words(a, b, out, 3.0f, 150, 7, 2, 1, 1) != SPINE_AOT_OK) return 1;
    if (more_words(a, b, more, 2.0f, 5, 4, 170, 2, 1, 1) != SPINE_AOT_OK) return 1;
    for (int i = 0; i < 200; i++) printf("%.9g %.9g\n", out[i], more[i]);
    return 0;
}
"""


def test_parameters_named_like_c_keywords_and_wrapper_locals(tmp_path):
    """int, default, rc, args, num_threads, grid_x, char, register, last_error, true, new, INT32_MAX and
    spine_arg0 as parameter names: the library builds, its header compiles as C and C++, and the kernels
    compute with the arguments given (not with the wrapper's thread count or error buffer)."""
    out = tmp_path / "build"
    kernels = f"{os.path.dirname(__file__)}/kernels.py"
    proc = subprocess.run([sys.executable, "-m", "spine.aot", "--target", "host", "--library", "words",
                           f"{kernels}:c_words_kernel", "-s", "*fp32,*fp32,*fp32,fp32,i32,i32", "-c", "BLOCK=128",
                           "--name", "c_words", f"{kernels}:more_words_kernel", "--name", "more_words",
                           "-s", "*fp32,*fp32,*fp32,fp32,i32,i32,i32", "-c", "BLOCK=128", "--out-dir", str(out)],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    header = (out / "words.h").read_text()
    assert ("int c_words(const float *spine_arg0, const float *spine_arg1, float *rc, float args, "
            "int32_t num_threads, int32_t spine_arg5, int grid_x, int grid_y, int grid_z);") in header
    assert "spine_arg0 is the kernel's parameter 'int' (a C or C++ keyword)" in header
    assert "spine_arg5 is the kernel's parameter 'grid_x' (a name the header" in header
    assert ("int more_words(const float *spine_arg0, const float *spine_arg1, float *last_error, float spine_arg3, "
            "int32_t spine_arg4, int32_t spine_arg5, int32_t spine_arg6, int grid_x") in header
    (tmp_path / "main.c").write_text(C_WORDS_MAIN)
    zig("c++", "-c", "-Wall", "-Werror", "-x", "c++", f"-I{out}", str(tmp_path / "main.c"), "-o",
        str(tmp_path / "main_cpp.o"))
    program = str(out / "main")
    zig("cc", "-std=c11", "-Wall", "-Werror", "-O2", f"-I{out}", str(tmp_path / "main.c"), f"-L{out}", "-lwords",
        "-Wl,-rpath,$ORIGIN", "-o", program)
    run = subprocess.run([program], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    got = torch.tensor([[float(v) for v in line.split()] for line in run.stdout.splitlines()])
    i = torch.arange(200)
    a, b = (i % 11).float(), 0.25 * i.float()
    torch.testing.assert_close(got[:, 0], torch.where(i < 150, a * 3.0 + b + 7, -1.0))
    torch.testing.assert_close(got[:, 1], torch.where(i < 170, a * 2.0 + b + 5 * 4, -1.0))


@pytest.mark.parametrize("name, why", [("int", "a C or C++ keyword"), ("spine_run_grid", "Spine's own prefix"),
                                       ("__add", "reserved"), ("size_t", "reserved for type names")])
def test_unusable_c_function_names_are_refused(tmp_path, name, why):
    proc = subprocess.run([sys.executable, "-m", "spine.aot", "--target", "host",
                           f"{os.path.dirname(__file__)}/kernels.py:add_kernel", "-s", "*fp32,*fp32,*fp32,i32",
                           "-c", "BLOCK=128", "--name", name, "--out-dir", str(tmp_path)],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2 and f"'{name}' ({why}" in proc.stderr and "Traceback" not in proc.stderr


def test_colliding_symbols_of_two_kernels_are_refused():
    from spine.aot.library import _check_distinct_symbols
    with pytest.raises(ValueError, match="'add' and 'add_last_error' of one library both define the C symbol "
                                         "'add_last_error'"):
        _check_distinct_symbols(["add", "add_last_error"])
    with pytest.raises(ValueError, match="both define the C symbol 'vadd'"):
        _check_distinct_symbols(["vadd", "vadd"])
