"""How smt reaches TTIR and what the conversion makes of it: reserved calls only for smt, the TTIR rewrites,
the packed matmul function, the micro-kernel each target gets."""
import pytest
import triton
import triton.language as tl
import triton.language.extra.smt as smt
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from spine.microkernels import MICROKERNELS, choose
from spine.errors import SpineCompilationError
from spine.language.smt.reference import RESERVED_PREFIX
from spine.to_linalg import smt_calls
from tests.to_linalg.test_golden import filecheck, without_locations


def compiled(kernel, signature, constants, arch="host"):
    return triton.compile(ASTSource(kernel, signature, constants), target=GPUTarget("cpu", arch, 1))


@triton.jit
def split_k_kernel(a_ptr, b_ptr, c_ptr, K, BK: tl.constexpr):
    a_blocks = tl.make_block_ptr(a_ptr, shape=[32, K], strides=[K, 1], offsets=[0, 0], block_shape=[32, BK],
                                 order=[1, 0])
    b_blocks = tl.make_block_ptr(b_ptr, shape=[K, 32], strides=[32, 1], offsets=[0, 0], block_shape=[BK, 32],
                                 order=[1, 0])
    acc = smt.view(tl.zeros((32, 32), dtype=tl.float32), (0, 0), (32, 32), (8, 16))
    for k in range(0, tl.cdiv(K, 16)):
        a = smt.view(smt.descriptor_load(a_blocks, (0, 0)), (0, k * 16), (32, 16), (8, 8))
        b = smt.view(smt.descriptor_load(b_blocks, (0, 0)), (k * 16, 0), (16, 32), (8, 16))
        acc += smt.dot(a, b)
    c = smt.view(acc, (0, 0), (32, 32), (1, 1))
    tl.store(c_ptr + tl.arange(0, 32)[:, None] * 32 + tl.arange(0, 32)[None, :], c)


SPLIT_K_SIGNATURE = {"a_ptr": "*fp32", "b_ptr": "*fp32", "c_ptr": "*fp32", "K": "i32", "BK": "constexpr"}


def test_smt_reaches_ttir_as_reserved_calls(fresh_cache):
    ttir = str(compiled(split_k_kernel, SPLIT_K_SIGNATURE, {(4,): 64}).asm["ttir"])
    # (printed in generic or custom form, depending on what the process printed before)
    assert f'@"{RESERVED_PREFIX}reference.dot__' in ttir and "tt.call" in ttir
    assert 'smt.microkernel = "' in ttir
    assert f'@"{RESERVED_PREFIX}reference.pack__' in ttir and "noinline = true" in ttir


def test_conversion_of_a_split_k_loop(fresh_cache):
    """The view of each loaded block loads only the view, `acc += smt.dot` is one matmul call inside the
    loop that updates the packed accumulator in place, operands packed from matrices are read from those
    matrices."""
    text = without_locations(compiled(split_k_kernel, SPLIT_K_SIGNATURE, {(4,): 64}).asm["linalg"])
    filecheck(text, """
CHECK: func.func private @spine_smt_matmul_{{[a-z0-9_]+}}_{{[0-9a-f]+}}(%{{.*}}: memref<32x16xf32, strided<[?, ?], offset: ?>> {spine.read_only}, %{{.*}}: memref<16x32xf32, strided<[?, ?], offset: ?>> {spine.read_only}, %{{.*}}: memref<4x2x8x16xf32, strided<[?, ?, ?, ?], offset: ?>>)
CHECK-SAME: no-builtins
CHECK: vector.fma
CHECK: func.func @split_k_kernel
CHECK: scf.for
CHECK-NOT: memref<32x64xf32>
CHECK: func.call @spine_smt_matmul_
CHECK-NOT: func.call
CHECK: scf.yield
""")


def test_reserved_names():
    assert smt_calls.RESERVED_PREFIX == RESERVED_PREFIX
    assert smt_calls.reserved_kind(RESERVED_PREFIX + "reference.pack__fp32S32_16S__(1,)cconstexpr_8_") == "pack"
    assert smt_calls.reserved_kind(RESERVED_PREFIX + "reference.dot_acc") == "dot_acc"
    assert smt_calls.reserved_kind("spine.language.smtx.pack") is None
    assert smt_calls.reserved_kind("__main__.pack__fp32S32_16S_") is None


@triton.jit(noinline=True)
def helper(x):
    return x * 2


@triton.jit
def ordinary_call_kernel(x_ptr):
    tl.store(x_ptr, helper(tl.load(x_ptr)))


def test_other_calls_are_not_smt(fresh_cache):
    """A call of any other noinline function is an ordinary call: inlined where the conversion inlines
    calls, else refused with the error for non-inlined calls; never lowered as smt."""
    try:
        text = compiled(ordinary_call_kernel, {"x_ptr": "*fp32"}, {}).asm["linalg"]
    except SpineCompilationError as err:
        assert "non-inlined device function calls are not supported" in str(err)
    else:
        assert "spine_smt" not in text


@triton.jit
def ordinary_pack_kernel(x_ptr):
    """Packing written in plain Triton is plain Triton: no smt lowering."""
    offs = tl.arange(0, 8)[:, None] * 8 + tl.arange(0, 8)[None, :]
    x = tl.permute(tl.reshape(tl.load(x_ptr + offs), (2, 4, 4, 2)), (0, 2, 1, 3))
    tl.store(x_ptr + offs, tl.reshape(x, (8, 8)))


def test_ordinary_code_is_not_smt(fresh_cache):
    text = compiled(ordinary_pack_kernel, {"x_ptr": "*fp32"}, {}).asm["linalg"]
    assert "spine_smt" not in text and "func.call" not in text


@pytest.mark.parametrize("triple,cpu,features,name", [
    ("riscv64-unknown-linux-gnu", "generic-rv64", "+64bit,+m,+a,+f,+d,+c,+v,+zfh,+zvfh", "rvv"),
    ("riscv64-unknown-linux-gnu", "generic-rv64", "+64bit,+m,+a,+f,+d,+c", "portable"),
    ("riscv64-unknown-linux-gnu", "spacemit-x60", "", "rvv-ime"),
    ("riscv64-unknown-linux-gnu", "sifive-x280", "", "rvv"),
    ("riscv64-unknown-linux-gnu", "generic-rv64", "", "portable"),
    ("x86_64-unknown-linux-gnu", "znver4", "", "avx512-vnni-bf16"),
    ("x86_64-unknown-linux-gnu", "znver3", "", "avx2-zen"),
    ("x86_64-unknown-linux-gnu", "haswell", "", "avx2"),
    ("x86_64-unknown-linux-gnu", "x86-64-v2", "", "sse"),
    ("x86_64-unknown-linux-gnu", "x86-64", "+avx2,+fma,-avx512f", "avx2"),
    ("x86_64-unknown-linux-gnu", "x86-64", "+avx512f,+avx512bw", "avx512"),
    # a feature string changes the CPU's own features; it does not replace them (as in LLVM)
    ("x86_64-unknown-linux-gnu", "znver4", "-sse4a", "avx512-vnni-bf16"),
    ("x86_64-unknown-linux-gnu", "znver4", "-avx512f", "avx2-zen"),
    ("riscv64-unknown-linux-gnu", "spacemit-x60", "-zfh", "rvv-ime"),
    ("riscv64-unknown-linux-gnu", "spacemit-x60", "-v", "portable"),
])
def test_microkernel_choice(triple, cpu, features, name):
    assert choose(triple, cpu, features).name == name


@pytest.mark.parametrize("cpu,features,level", [
    ("znver4", "", "x86-64-v4"), ("znver4", "-sse4a", "x86-64-v4"), ("znver4", "-avx512f", "x86-64-v3"),
    ("x86-64", "+avx2,+fma,+bmi2,+movbe", "x86-64-v3"), ("unknown-cpu", "", "x86-64"),
])
def test_generic_cpu_keeps_the_instruction_set(cpu, features, level):
    from spine.targets import generic_cpu
    assert generic_cpu("x86_64-unknown-linux-gnu", cpu, features) == level


def test_register_blocks_fit():
    """Every micro-kernel's accumulators and B vectors fit the register file it was sized for, and panel
    widths are powers of two (the packing copies runs that must not cross a panel's edge)."""
    registers = {"rvv": 32, "rvv-ime": 32, "ime": 32, "rvv-a100": 32, "a100": 32, "avx512": 32, "avx512-amx": 32, "amx": 8, "avx512-vnni": 32,
                 "avx512-vnni-bf16": 32, "vnni": 32, "avx2-vnni": 16, "avxvnni": 16, "avx2": 16, "avx2-zen": 16, "sse": 16, "portable": 32}
    for kernel in MICROKERNELS.values():
        if kernel.name in ("ime", "a100"):   # register pairs of sums per A tile (4 or 8 rows) and B tile, the tiles
            tile = 4 if kernel.name == "ime" else 8
            used = (kernel.rows // tile) * kernel.vectors * 2 + kernel.rows // tile + kernel.vectors
        elif kernel.name == "amx":   # a tile of sums per A tile (16 rows) and B tile, and the tiles
            used = (kernel.rows // 16) * kernel.vectors + kernel.rows // 16 + kernel.vectors
        else:
            used = kernel.rows * kernel.vectors + kernel.vectors
        assert used <= registers[kernel.name], kernel.name
        width = kernel.lanes * kernel.vectors
        assert width & (width - 1) == 0, kernel.name


def test_riscv_kernels_use_the_rvv_microkernel(fresh_cache):
    ttir = str(compiled(split_k_kernel, SPLIT_K_SIGNATURE, {(4,): 64}, arch="riscv64").asm["ttir"])
    assert 'smt.microkernel = "rvv"' in ttir


@triton.jit
def sub_blocks_kernel(a_ptr, b_ptr, c_ptr, M):
    """smt.parallel sub-blocks of rows, all multiplied by one block of B."""
    rk, rn = tl.arange(0, 32), tl.arange(0, 32)
    b = smt.view(tl.load(b_ptr + rk[:, None] * 32 + rn[None, :]), (0, 0), (32, 32), (8, 16))
    for s in smt.parallel(0, tl.cdiv(M, 16)):
        rm = s * 16 + tl.arange(0, 16)
        a = smt.view(tl.load(a_ptr + rm[:, None] * 32 + rk[None, :]), (0, 0), (16, 32), (8, 8))
        c = smt.view(smt.dot(a, b), (0, 0), (16, 32), (1, 1))
        tl.store(c_ptr + rm[:, None] * 32 + rn[None, :], c)


def test_b_is_packed_once_before_a_loop(fresh_cache):
    text = without_locations(compiled(sub_blocks_kernel, {"a_ptr": "*fp32", "b_ptr": "*fp32", "c_ptr": "*fp32",
                                                           "M": "i32"}, {}).asm["linalg"])
    filecheck(text, """
CHECK: func.func @sub_blocks_kernel
CHECK: call @spine_smt_b_panels_
CHECK: scf.for
CHECK-NOT: spine_smt_b_panels_
CHECK: call @spine_smt_matmul_
""")
