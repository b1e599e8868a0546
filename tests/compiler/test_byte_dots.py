"""Sums of byte products on vpdpbusd (compiler/byte_dots.py): the rewrite on IR text, what it refuses, and
kernels against torch's exact integer sums on both targets, with rows that fill the vectors and rows that do
not. The host's code shows vpdpbusd where its CPU has AVX512-VNNI or AVX-VNNI; riscv64's never does."""
import glob
import os

import pytest
import torch
import triton
import triton.language as tl

from spine.compiler.byte_dots import byte_dots_on_vnni
from tests.compiler.ir_rewrites import rewritten

# 16 rows of 16 bytes: the nibbles of %w against %a (low) and %b (high), as a Q4_1 block's dot product
NIBBLES = """
func.func @k(%w: memref<16x16xi8, strided<[20, 1], offset: ?>>, %a: memref<16x16xi8, strided<[32, 1], offset: ?>>,
             %b: memref<16x16xi8, strided<[32, 1], offset: ?>>, %out: memref<16xi32>) {
  linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>,
                                   affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>],
                  iterator_types = ["parallel", "reduction"]}
      ins(%w, %a, %b : memref<16x16xi8, strided<[20, 1], offset: ?>>, memref<16x16xi8, strided<[32, 1], offset: ?>>,
          memref<16x16xi8, strided<[32, 1], offset: ?>>) outs(%out : memref<16xi32>) {
  ^bb0(%x: i8, %y: i8, %z: i8, %o: i32):
    %c15 = arith.constant 15 : i8
    %c4 = arith.constant 4 : i8
    %lo = arith.andi %x, %c15 : i8
    %hi = arith.shrui %x, %c4 : i8
    %ulo = arith.extui %lo : i8 to i32
    %slo = arith.extsi %y : i8 to i32
    %plo = arith.muli %ulo, %slo : i32
    %uhi = arith.extui %hi : i8 to i32
    %shi = arith.extsi %z : i8 to i32
    %phi = arith.muli %shi, %uhi : i32
    %p = arith.addi %plo, %phi : i32
    %s = arith.addi %o, %p : i32
    linalg.yield %s : i32
  }
  return
}
"""


def _pass(lanes=16):
    notes = []

    def rewrite(module):
        notes.append(byte_dots_on_vnni(module, lanes))
    return rewrite, notes


def test_nibble_products_become_vpdpbusd_on_rows_loaded_where_they_are():
    rewrite, notes = _pass()
    text = rewritten(NIBBLES, rewrite)
    assert notes == [None]
    assert "linalg.generic" not in text
    # 4 vectors of 4 rows, each the low and the high nibbles' products: 8 instructions, unrolled in one chunk
    assert text.count('llvm.call_intrinsic "llvm.x86.avx512.vpdpbusd.512"') == 8
    assert "vector.load %arg0" in text and "vector<16xi8>" in text       # a row of the weights at a time
    assert "arith.andi" in text and "arith.shrui" in text and "vector<64xi8>" in text
    # the partial lanes of each row summed pairwise twice (4 lanes a row), then added to the output
    assert text.count("vector.shuffle") >= 6 + 2 * 3 * 3
    assert "vector.store" in text and "memref<16xi32>" in text


def test_rows_whose_strides_are_known_at_run_time_are_checked_first():
    """A masked tile's view (strided<[?, ?]>): the vector loop runs where its bytes are contiguous, on a
    view that says so; the generic, unchanged, where they are not."""
    rewrite, notes = _pass()
    dynamic = NIBBLES.replace("strided<[20, 1], offset: ?>", "strided<[?, ?], offset: ?>")
    text = rewritten(dynamic, rewrite)
    assert notes == [None]
    assert "memref.extract_strided_metadata %arg0" in text and "arith.cmpi eq" in text and "scf.if" in text
    assert "memref.reinterpret_cast" in text and "strided<[?, 1], offset: ?>" in text
    assert text.count("linalg.generic") == 1 and text.index("vpdpbusd") < text.index("} else {") \
        < text.index("linalg.generic")


def test_avx_vnni_takes_256_bits():
    rewrite, notes = _pass(lanes=8)
    text = rewritten(NIBBLES, rewrite)
    assert notes == [None] and text.count('"llvm.x86.avx512.vpdpbusd.256"') == 8


def test_signed_times_signed_bytes_are_refused():
    rewrite, notes = _pass()
    signed = NIBBLES.replace("%ulo = arith.extui %lo", "%ulo = arith.extsi %lo")
    text = rewritten(signed, rewrite)
    assert "linalg.generic" in text and "vpdpbusd" not in text
    assert notes == ["gave up on 1 of 1 byte-product sums (first: a product of two signed or two unsigned bytes)"]


def test_rows_too_few_for_a_vector_of_sums_load_only_themselves():
    """10 rows: a vector of sums takes 16, so 3 vectors of rows (4 a vector) are loaded, the last with 2 rows
    and zeros, and the sums stored under a mask of 10 lanes; a fourth vector would be all zeros, not computed."""
    rewrite, notes = _pass()
    text = rewritten(NIBBLES.replace("16x16xi8", "10x16xi8").replace("memref<16xi32>", "memref<10xi32>"), rewrite)
    assert notes == [None] and "linalg.generic" not in text and "scf.for" not in text
    assert text.count("vpdpbusd") == 3 * 2
    assert text.count("vector.load %arg0") == 10
    assert "vector<10xi32>" in text and "masked" not in text


def test_rows_longer_than_a_vector_are_refused():
    rewrite, notes = _pass()
    long_rows = NIBBLES.replace("16x16xi8", "16x128xi8").replace("[20, 1]", "[200, 1]").replace("[32, 1]", "[256, 1]")
    text = rewritten(long_rows, rewrite)
    assert "linalg.generic" in text
    assert notes[0] == ("gave up on 1 of 1 byte-product sums (first: rows of 128 bytes, more than a vector of 64 "
                        "or not a part of one)")


def test_a_body_doing_more_than_byte_products_is_refused():
    rewrite, notes = _pass()
    text = rewritten(NIBBLES.replace("%s = arith.addi %o, %p : i32", "%s2 = arith.addi %o, %p : i32\n"
                                     "    %s = arith.shli %s2, %s2 : i32"), rewrite)
    assert "linalg.generic" in text and notes[0].startswith("gave up on 1 of 1")


def _has_vpdpbusd(target: str) -> bool:
    """Whether code for `target` ("host" or "riscv64") may use vpdpbusd: the CPU it is compiled for."""
    from spine.targets import byte_dot_lanes, host_target
    t = host_target()
    return target == "host" and byte_dot_lanes(t.triple, t.cpu, t.features) > 0


@triton.jit
def nibble_dots_kernel(w_ptr, x_ptr, out_ptr, rows, ROWS: tl.constexpr, W_STRIDE: tl.constexpr):
    """Each row's 32 nibbles of 16 bytes against its 32 signed bytes: a Q4_1 block's integer dot product."""
    r = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    j = tl.arange(0, 16)
    inside = r < rows
    w = tl.load(w_ptr + r[:, None] * W_STRIDE + j[None, :], mask=inside[:, None], other=0)
    lo = tl.load(x_ptr + r[:, None] * 32 + j[None, :], mask=inside[:, None], other=0)
    hi = tl.load(x_ptr + r[:, None] * 32 + 16 + j[None, :], mask=inside[:, None], other=0)
    s = tl.sum((w & 15).to(tl.int32) * lo.to(tl.int32) + (w >> 4).to(tl.int32) * hi.to(tl.int32), axis=1)
    tl.store(out_ptr + r, s, mask=inside)


@triton.jit
def group_dots_kernel(a_ptr, b_ptr, out_ptr, G: tl.constexpr, ROWS: tl.constexpr):
    """Sums of 4 products in groups, each group's own output ([ROWS, G, 4] summed over the 4)."""
    r = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    k = tl.arange(0, 4 * G)
    a = tl.load(a_ptr + r[:, None] * 4 * G + k[None, :])
    b = tl.load(b_ptr + r[:, None] * 4 * G + k[None, :])
    s = tl.sum(tl.reshape(a.to(tl.int32) * b.to(tl.int32), [ROWS, G, 4]), axis=2)
    tl.store(out_ptr + r[:, None] * G + tl.arange(0, G)[None, :], s)


def _assembly(directory, kernel: str) -> str:
    path, = glob.glob(os.path.join(str(directory), f"{kernel}*.s"))
    with open(path) as f:
        return f.read()


@pytest.mark.parametrize("rows, block, stride", [(48, 16, 20), (37, 16, 20), (70, 32, 16), (24, 8, 20)])
def test_nibble_dots_against_torch(rows, block, stride, target, tmp_path, monkeypatch):
    """37 rows: the last program's rows past the end are masked (zeros, from the tile's padded copy); blocks
    of 8 rows fill half a vector of sums."""
    torch.manual_seed(rows)
    w = torch.randint(0, 256, (rows, stride), dtype=torch.uint8)
    x = torch.randint(-128, 128, (rows, 32), dtype=torch.int8)
    out = torch.empty(rows, dtype=torch.int32)
    monkeypatch.setenv("SPINE_TRITON_DUMP_PATH", str(tmp_path))
    nibble_dots_kernel[(triton.cdiv(rows, block),)](w, x, out, rows, ROWS=block, W_STRIDE=stride)
    wi, xi = w[:, :16].to(torch.int32), x.to(torch.int32)
    assert torch.equal(out, ((wi & 15) * xi[:, :16] + (wi >> 4) * xi[:, 16:]).sum(1))
    assert ("vpdpbusd" in _assembly(tmp_path, "nibble_dots_kernel")) == _has_vpdpbusd(target)


@pytest.mark.parametrize("groups, rows", [(4, 16), (8, 8), (16, 4), (2, 2)])
def test_group_dots_against_torch(groups, rows, target, tmp_path, monkeypatch):
    torch.manual_seed(groups)
    a = torch.randint(0, 256, (2 * rows, 4 * groups), dtype=torch.uint8)
    b = torch.randint(-128, 128, (2 * rows, 4 * groups), dtype=torch.int8)
    out = torch.empty(2 * rows, groups, dtype=torch.int32)
    monkeypatch.setenv("SPINE_TRITON_DUMP_PATH", str(tmp_path))
    group_dots_kernel[(2,)](a, b, out, G=groups, ROWS=rows)
    ref = (a.to(torch.int32) * b.to(torch.int32)).reshape(2 * rows, groups, 4).sum(2)
    assert torch.equal(out, ref)
    assert ("vpdpbusd" in _assembly(tmp_path, "group_dots_kernel")) == _has_vpdpbusd(target)


@triton.jit
def row_dots_kernel(a_ptr, b_ptr, out_ptr, E: tl.constexpr, ROWS: tl.constexpr):
    """Each row's E unsigned bytes against its E signed ones."""
    r = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    k = tl.arange(0, E)
    a = tl.load(a_ptr + r[:, None] * E + k[None, :])
    b = tl.load(b_ptr + r[:, None] * E + k[None, :])
    tl.store(out_ptr + r, tl.sum(a.to(tl.int32) * b.to(tl.int32), axis=1))


@pytest.mark.parametrize("extent, rows", [(8, 32), (32, 16), (64, 4), (16, 2)])
def test_row_dots_of_every_width_against_torch(extent, rows, target, tmp_path, monkeypatch):
    """2 to 16 partial lanes a row summed pairwise; 4 and 2 rows fill a quarter and an eighth of a vector of
    sums. All 255 and -128 too: the largest products, whose 32-bit sums must not saturate."""
    a = torch.randint(0, 256, (2 * rows, extent), dtype=torch.uint8)
    b = torch.randint(-128, 128, (2 * rows, extent), dtype=torch.int8)
    a[0], b[0] = 255, -128
    out = torch.empty(2 * rows, dtype=torch.int32)
    monkeypatch.setenv("SPINE_TRITON_DUMP_PATH", str(tmp_path))
    row_dots_kernel[(2,)](a, b, out, E=extent, ROWS=rows)
    assert torch.equal(out, (a.to(torch.int32) * b.to(torch.int32)).sum(1))
    assert ("vpdpbusd" in _assembly(tmp_path, "row_dots_kernel")) == _has_vpdpbusd(target)


@pytest.mark.parametrize("cpu, lanes", [("znver4", 16), ("icelake-server", 16), ("alderlake", 8),
                                        ("x86-64-v3", 0), ("x86-64-v4", 0)])
def test_the_pass_runs_on_cpus_with_vpdpbusd(cpu, lanes, monkeypatch):
    """Chosen by the CPU the code is for, not the machine compiling it; x86-64-v4 is AVX-512 without VNNI
    (Skylake-X). The module is the host's linalg of a kernel, lowered for each CPU in turn."""
    from spine.compiler.lower import LoweringChoices, lower_with_record
    from spine.driver import CPUDriver
    assert LoweringChoices.for_target("x86_64-unknown-linux-gnu", cpu=cpu).byte_dot_lanes == lanes
    assert LoweringChoices.for_target("riscv64-unknown-linux-gnu", cpu="spacemit-x60").byte_dot_lanes == 0
    monkeypatch.setenv("SPINE_TARGET", "host")
    triton.runtime.driver.set_active(CPUDriver(target="host"))
    a = torch.zeros(32, 16, dtype=torch.uint8)
    linalg = group_dots_kernel[(2,)](a, a.view(torch.int8), torch.empty(32, 4, dtype=torch.int32), G=4,
                                     ROWS=16).asm["linalg"]
    llir, record = lower_with_record(linalg, LoweringChoices.for_target("x86_64-unknown-linux-gnu", cpu=cpu))
    assert record.ran("byte-dots-on-vnni") == (lanes > 0)
    assert ("vpdpbusd" in llir) == (lanes > 0)
