"""Bounds checks (debug=True or TRITON_DEBUG=1): every access is checked against its tensor argument.

Kernels that go out of bounds run with a grid of one program (or one offending program), so the first
failure recorded, and with it the reported offset, is deterministic."""
import os
import re
import subprocess
import sys
import textwrap

import pytest
import torch
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.tools.tensor_descriptor import TensorDescriptor

from spine.errors import DeviceAssertionError, OutOfBoundsError
from tests.kernels import add_kernel, transpose_kernel

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def line_of(marker: str) -> int:
    """The line of this file that ends with `# <marker>`."""
    with open(__file__) as f:
        lines = [n for n, text in enumerate(f, 1) if text.rstrip().endswith(f"# {marker}")]
    assert len(lines) == 1, marker
    return lines[0]


def expect(access: str, name: str, kernel: str, offset: int, extent: int, marker: str) -> str:
    """The pattern an OutOfBoundsError's message must match."""
    return (rf"out-of-bounds {access} '{re.escape(name)}' in kernel '{kernel}' at "
            rf"\S*test_bounds_check\.py:{line_of(marker)}:\d+: element offset {offset} is outside "
            rf"\[0, {extent}\)")


# ------------------------------------------------------------------------------------------ kernels

@triton.jit
def copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=-5.0)  # copy-load
    tl.store(out_ptr + offs, x, mask=mask)  # copy-store


@triton.jit
def square_gather_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs * offs))  # gather


@triton.jit
def masked_square_gather_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    idx = offs * offs
    tl.store(out_ptr + offs, tl.load(x_ptr + idx, mask=idx < n, other=-1.0))


@triton.jit
def scatter_kernel(x_ptr, idx_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + tl.load(idx_ptr + offs), tl.load(x_ptr + offs))  # scatter


@triton.jit
def scalar_kernel(x_ptr, out_ptr, i):
    tl.store(out_ptr, tl.load(x_ptr + i))  # scalar-load


@triton.jit
def atomic_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.atomic_add(x_ptr + offs, 1.0, mask=offs < n)  # atomic


@triton.jit
def tile_2d_kernel(x_ptr, out_ptr, stride, BM: tl.constexpr, BN: tl.constexpr):
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    tile = tl.load(x_ptr + rm[:, None] * stride + rn[None, :])  # tile-2d
    tl.store(out_ptr + rm[:, None] * stride + rn[None, :], tile)


@triton.jit
def block_pointer_kernel(x_ptr, out_ptr, M, N, off_m, BM: tl.constexpr, BN: tl.constexpr, CHECK: tl.constexpr):
    src = tl.make_block_ptr(x_ptr, shape=(M, N), strides=(N, 1), offsets=(off_m, 0), block_shape=(BM, BN),
                            order=(1, 0))
    if CHECK:
        tile = tl.load(src, boundary_check=(0, 1))
    else:
        tile = tl.load(src)  # block-pointer
    dst = tl.make_block_ptr(out_ptr, shape=(BM, BN), strides=(BN, 1), offsets=(0, 0), block_shape=(BM, BN),
                            order=(1, 0))
    tl.store(dst, tile)


@triton.jit
def descriptor_kernel(in_desc, out_ptr, BM: tl.constexpr, BN: tl.constexpr):
    m0 = tl.program_id(0) * BM
    tile = in_desc.load([m0, 0])  # descriptor
    offs = (m0 + tl.arange(0, BM))[:, None] * BN + tl.arange(0, BN)[None, :]
    tl.store(out_ptr + offs, tile)


@triton.jit
def bitcast_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    bits = tl.load(x_ptr.to(tl.pointer_type(tl.int32), bitcast=True) + offs)  # bitcast
    tl.store(out_ptr + offs, bits)


# ------------------------------------------------------------------------------------------- failures

def test_structured_load_out_of_bounds(target):
    x = torch.arange(100, dtype=torch.float32)
    out = torch.zeros(128)
    with pytest.raises(OutOfBoundsError, match=expect("load from", "x_ptr", "copy_kernel", 127, 100, "copy-load")):
        copy_kernel[(1,)](x, out, 128, BLOCK=128, debug=True)
    # The whole tile load was skipped: every lane holds `other`, and the store went ahead.
    torch.testing.assert_close(out, torch.full((128,), -5.0))


def test_structured_store_out_of_bounds_leaves_memory_alone(target):
    backing = torch.full((256,), -1.0)
    out = backing[:100]
    x = torch.arange(128, dtype=torch.float32)
    with pytest.raises(OutOfBoundsError, match=expect("store to", "out_ptr", "copy_kernel", 127, 100, "copy-store")):
        copy_kernel[(1,)](x, out, 128, BLOCK=128, debug=True)
    torch.testing.assert_close(backing, torch.full((256,), -1.0))


def test_out_of_bounds_is_an_assertion_error_with_the_kernel_name(target):
    with pytest.raises(DeviceAssertionError, match=r"in kernel 'copy_kernel'.*\(pid \(0, 0, 0\)\)"):
        copy_kernel[(1,)](torch.zeros(10), torch.zeros(16), 16, BLOCK=16, debug=True)


def test_gather_with_a_computed_index(target):
    x = torch.arange(50, dtype=torch.float32)
    out = torch.zeros(16)
    # offs * offs reaches 64 at lane 8: the first lane outside the 50 elements.
    with pytest.raises(OutOfBoundsError, match=expect("load from", "x_ptr", "square_gather_kernel", 64, 50, "gather")):
        square_gather_kernel[(1,)](x, out, BLOCK=16, debug=True)
    lanes = torch.arange(8)
    torch.testing.assert_close(out[:8], x[lanes * lanes])


def test_scatter_with_a_loaded_index(target):
    backing = torch.zeros(64)
    out = backing[:16]
    idx = torch.arange(16, dtype=torch.int32)
    idx[5] = 40
    x = torch.arange(16, dtype=torch.float32) + 1
    with pytest.raises(OutOfBoundsError, match=expect("store to", "out_ptr", "scatter_kernel", 40, 16, "scatter")):
        scatter_kernel[(1,)](x, idx, out, BLOCK=16, debug=True)
    assert backing[40] == 0 and backing[16:].eq(0).all()
    assert out[4] == 5 and out[6] == 7


@pytest.mark.parametrize("i", [10, -1])
def test_scalar_load(target, i):
    x = torch.arange(10, dtype=torch.float32)
    out = torch.zeros(1)
    with pytest.raises(OutOfBoundsError, match=expect("load from", "x_ptr", "scalar_kernel", i, 10, "scalar-load")):
        scalar_kernel[(1,)](x, out, i, debug=True)


def test_atomic(target):
    backing = torch.zeros(32)
    x = backing[:10]
    with pytest.raises(OutOfBoundsError, match=expect("atomic on", "x_ptr", "atomic_kernel", 10, 10, "atomic")):
        atomic_kernel[(1,)](x, 16, BLOCK=16, debug=True)
    torch.testing.assert_close(backing, torch.cat([torch.ones(10), torch.zeros(22)]))


def test_extent_of_a_strided_view(target):
    # Rows 0-3, columns 0-7 of a 4x16 tensor: the view may touch 3 * 16 + 8 = 56 elements from its start,
    # so column 8 onwards of the last row (offset 56 and up) is out of bounds, though the storage has it.
    base = torch.arange(64, dtype=torch.float32).reshape(4, 16)
    view = base[:, :8]
    out = torch.zeros(4, 16)
    with pytest.raises(OutOfBoundsError, match=expect("load from", "x_ptr", "tile_2d_kernel", 63, 56, "tile-2d")):
        tile_2d_kernel[(1,)](view, out, 16, BM=4, BN=16, debug=True)
    tile_2d_kernel[(1,)](view, out, 16, BM=4, BN=8, debug=True)
    torch.testing.assert_close(out[:, :8], view)


def test_block_pointer_without_boundary_check(target):
    x = torch.randn(20, 8)
    out = torch.zeros(16, 8)
    with pytest.raises(OutOfBoundsError, match=expect("load from", "x_ptr", "block_pointer_kernel", 20 * 8 + 7, 160,
                                                      "block-pointer")):
        block_pointer_kernel[(1,)](x, out, 20, 8, 5, BM=16, BN=8, CHECK=False, debug=True)


def test_tensor_descriptor_larger_than_its_tensor(target):
    x = torch.randn(20, 16)
    out = torch.zeros(32, 16)
    # The descriptor claims 24 rows; rows 20-23 lie beyond the tensor (masked loads reach only row 23).
    desc = TensorDescriptor(x, shape=[24, 16], strides=[16, 1], block_shape=[16, 16])
    with pytest.raises(OutOfBoundsError, match=expect("load from", "in_desc", "descriptor_kernel", 24 * 16 - 1, 320,
                                                      "descriptor")):
        descriptor_kernel[(2,)](desc, out, BM=16, BN=16, debug=True)


def test_pointer_cast_view_uses_the_argument_extent(target):
    x = torch.randn(8)
    out = torch.zeros(16, dtype=torch.int32)
    with pytest.raises(OutOfBoundsError, match=expect("load from", "x_ptr", "bitcast_kernel", 15, 8, "bitcast")):
        bitcast_kernel[(1,)](x, out, BLOCK=16, debug=True)
    bitcast_kernel[(1,)](x, out[:8], BLOCK=8, debug=True)
    torch.testing.assert_close(out[:8], x.view(torch.int32))


# ------------------------------------------------------------------------------------------ no failure

def test_masked_off_lanes_are_not_checked(target):
    x = torch.arange(100, dtype=torch.float32)
    out = torch.zeros(100)
    copy_kernel[(4,)](x, out, 100, BLOCK=32, debug=True)
    torch.testing.assert_close(out, x)
    out = torch.zeros(16)
    masked_square_gather_kernel[(1,)](x[:50], out, 50, BLOCK=16, debug=True)
    lanes = torch.arange(16)
    torch.testing.assert_close(out, torch.where(lanes * lanes < 50, (lanes * lanes).float(), -1.0))
    counts = torch.zeros(10)
    atomic_kernel[(1,)](counts, 10, BLOCK=16, debug=True)
    torch.testing.assert_close(counts, torch.ones(10))


def test_in_bounds_kernels_are_correct(target):
    m, n = 37, 29
    x = torch.randn(m, n)
    out = torch.zeros(n, m)
    transpose_kernel[(triton.cdiv(m, 16), triton.cdiv(n, 16))](x, out, m, n, x.stride(0), x.stride(1), out.stride(0),
                                                                out.stride(1), BM=16, BN=16, debug=True)
    torch.testing.assert_close(out, x.t())
    x = torch.randn(300)
    out = torch.zeros(300)
    add_kernel[(3,)](x, x, out, 300, BLOCK=128, debug=True)
    torch.testing.assert_close(out, x + x)
    scalar_kernel[(1,)](x, out, 299, debug=True)
    assert out[0] == x[299]


def test_in_place_call_uses_a_checked_copying_variant(target):
    # Reading and writing the same tensor makes the launcher switch to the variant that copies tiles first.
    x = torch.arange(100, dtype=torch.float32)
    copy_kernel[(1,)](x, x, 100, BLOCK=128, debug=True)
    torch.testing.assert_close(x, torch.arange(100, dtype=torch.float32))
    with pytest.raises(OutOfBoundsError, match=expect("load from", "x_ptr", "copy_kernel", 127, 100, "copy-load")):
        copy_kernel[(1,)](x, x, 128, BLOCK=128, debug=True)


def test_boundary_checked_block_pointers_and_descriptors_pass(target):
    x = torch.randn(20, 8)
    out = torch.zeros(16, 8)
    block_pointer_kernel[(1,)](x, out, 20, 8, 10, BM=16, BN=8, CHECK=True, debug=True)
    torch.testing.assert_close(out, torch.cat([x[10:], torch.zeros(6, 8)]))
    x = torch.randn(20, 16)
    out = torch.zeros(32, 16)
    descriptor_kernel[(2,)](TensorDescriptor.from_tensor(x, [16, 16]), out, BM=16, BN=16, debug=True)
    torch.testing.assert_close(out, torch.cat([x, torch.zeros(12, 16)]))


def test_the_next_launch_works(target):
    x = torch.arange(100, dtype=torch.float32)
    out = torch.zeros(128)
    with pytest.raises(OutOfBoundsError):
        copy_kernel[(1,)](x, out, 128, BLOCK=128, debug=True)
    out = torch.zeros(100)
    copy_kernel[(1,)](x, out, 100, BLOCK=128, debug=True)
    torch.testing.assert_close(out, x)
    copy_kernel[(1,)](x, out, 100, BLOCK=128)  # and without debug
    torch.testing.assert_close(out, x)


def test_triton_debug_environment_variable(target, tmp_path):
    # triton reads TRITON_DEBUG when it is imported: a fresh interpreter shows that it reaches the compile.
    script = tmp_path / "oob.py"
    script.write_text(textwrap.dedent(f"""
        import torch, triton, triton.language as tl
        from spine.driver import CPUDriver
        from spine.errors import OutOfBoundsError
        triton.runtime.driver.set_active(CPUDriver(target="{target}"))

        @triton.jit
        def read_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            tl.store(out_ptr + offs, tl.load(x_ptr + offs))

        try:
            read_kernel[(1,)](torch.zeros(8), torch.zeros(16), BLOCK=16)
        except OutOfBoundsError as error:
            print("raised:", error)
        else:
            print("not raised")
    """))
    env = dict(os.environ, TRITON_DEBUG="1", PYTHONPATH=REPO)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"raised: out-of-bounds load from 'x_ptr' in kernel 'read_kernel' at \S*oob\.py:\d+:\d+: "
                     r"element offset 15 is outside \[0, 8\)", proc.stdout), proc.stdout


def linalg_of(kernel, signature, constants, **options) -> str:
    compiled = triton.compile(ASTSource(kernel, signature, constants), target=GPUTarget("cpu", "host", 1),
                              options=options)
    return compiled.asm["linalg"]


def test_without_debug_nothing_is_checked(fresh_cache):
    signature = {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}
    plain = linalg_of(copy_kernel, signature, {(3,): 64})
    checked = linalg_of(copy_kernel, signature, {(3,): 64}, debug=True)
    assert "spine_bounds_fail" not in plain and "spine_bounds_fail" in checked

    def i64_arguments(text):
        header = next(line for line in text.splitlines() if "func.func @copy_kernel(" in line)
        return len(re.findall(r"%arg\d+: i64", header))
    assert i64_arguments(plain) == 0
    assert i64_arguments(checked) == 2  # the two extents
