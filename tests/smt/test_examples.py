"""What spine-triton's smt examples do (python/examples in spacemit-com/spine-triton: the plain smt matmul,
the packing kernels, a matmul with a fused SiLU epilogue), written afresh with the same API calls and
checked the way those examples check themselves."""
import pytest
import torch
import triton
import triton.language as tl
import triton.language.extra.smt as smt
from triton.language.extra.cpu import libdevice


@triton.jit
def matmul_tiles(a_ptr, b_ptr, M, N, K, sam, sak, sbk, sbn, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                 MM: tl.constexpr, MK: tl.constexpr, MN: tl.constexpr):
    """The packed product of this program's block of rows and block of columns, as packed tiles."""
    a_blocks = tl.make_block_ptr(a_ptr, shape=[M, K], strides=[sam, sak], offsets=[tl.program_id(0) * BM, 0],
                                 block_shape=[BM, BK], order=[1, 0])
    b_blocks = tl.make_block_ptr(b_ptr, shape=[K, N], strides=[sbk, sbn], offsets=[0, tl.program_id(1) * BN],
                                 block_shape=[BK, BN], order=[1, 0])
    a = smt.view(smt.descriptor_load(a_blocks, (0, 0)), (0, 0), (BM, BK), (MM, MK))
    b = smt.view(smt.descriptor_load(b_blocks, (0, 0)), (0, 0), (BK, BN), (MK, MN))
    return smt.dot(a, b)


@triton.jit
def store_tiles(c_ptr, tiles, M, N, scm, scn, BM: tl.constexpr, BN: tl.constexpr):
    c = smt.view(tiles, (0, 0), (BM, BN), (1, 1))
    c_blocks = tl.make_block_ptr(c_ptr, shape=[M, N], strides=[scm, scn],
                                 offsets=[tl.program_id(0) * BM, tl.program_id(1) * BN], block_shape=[BM, BN],
                                 order=[1, 0])
    tl.store(c_blocks, c, boundary_check=(0, 1))


@triton.jit
def smt_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn, BM: tl.constexpr,
                      BN: tl.constexpr, BK: tl.constexpr, MM: tl.constexpr, MK: tl.constexpr, MN: tl.constexpr):
    tiles = matmul_tiles(a_ptr, b_ptr, M, N, K, sam, sak, sbk, sbn, BM, BN, BK, MM, MK, MN)
    store_tiles(c_ptr, tiles.to(c_ptr.dtype.element_ty), M, N, scm, scn, BM, BN)


@triton.jit
def smt_matmul_silu_kernel(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn, BM: tl.constexpr,
                           BN: tl.constexpr, BK: tl.constexpr, MM: tl.constexpr, MK: tl.constexpr,
                           MN: tl.constexpr):
    tiles = matmul_tiles(a_ptr, b_ptr, M, N, K, sam, sak, sbk, sbn, BM, BN, BK, MM, MK, MN)
    # The epilogue runs on the packed tiles, before they are unpacked.
    store_tiles(c_ptr, libdevice.silu(tiles.to(c_ptr.dtype.element_ty)), M, N, scm, scn, BM, BN)


def launch(kernel, a, b, block, micro):
    (m, k), n = a.shape, b.shape[1]
    c = torch.empty(m, n, dtype=a.dtype)
    grid = (triton.cdiv(m, block[0]), triton.cdiv(n, block[1]))
    kernel[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                 BM=block[0], BN=block[1], BK=triton.next_power_of_2(k), MM=micro[0], MK=micro[1], MN=micro[2])
    return c


@pytest.mark.parametrize("dtype,micro", [(torch.float16, (16, 8, 32)), (torch.float32, (8, 8, 16))])
def test_smt_matmul(target, dtype, micro):
    a = torch.randn(50, 40).to(dtype)
    b = torch.randn(40, 70).to(dtype)
    c = launch(smt_matmul_kernel, a, b, (32, 64), micro)
    torch.testing.assert_close(c.float(), torch.mm(a.float(), b.float()), atol=1e-1 if dtype == torch.float16
                               else 1e-4, rtol=1e-2 if dtype == torch.float16 else 1e-4)


@pytest.mark.parametrize("m,n", [(64, 64), (50, 70)])
@pytest.mark.parametrize("dtype,micro", [(torch.float16, (16, 8, 32)), (torch.float32, (8, 8, 16))])
def test_smt_matmul_silu(target, m, n, dtype, micro):
    """The SiLU example's own check (atol 1e-2 against torch in the inputs' type), at a K whose products
    stay below 16; ragged M and N too."""
    a = torch.randn(m, 32, dtype=dtype)
    b = torch.randn(32, n, dtype=dtype)
    c = launch(smt_matmul_silu_kernel, a, b, (32, 32), micro)
    torch.testing.assert_close(c, torch.nn.functional.silu(torch.mm(a, b)), atol=1e-2, rtol=0)


# ------------------------------------------------------------------------------------------- packing

@triton.jit
def pack_rows_kernel(x_ptr, out_ptr, R, C, sr, sc, s0, s1, s2, s3, BR: tl.constexpr, BC: tl.constexpr,
                     P0: tl.constexpr, P1: tl.constexpr):
    """x [R, C] -> [R/P0, C/P1, P0, P1] micro tiles (zero past the edges), one block of rows per program."""
    block = tl.make_block_ptr(x_ptr, shape=[R, C], strides=[sr, sc], offsets=[tl.program_id(0) * BR, 0],
                              block_shape=[BR, BC], order=[1, 0])
    tiles = smt.view(smt.descriptor_load(block, (0, 0)), (0, 0), (BR, BC), (P0, P1))
    out = tl.make_block_ptr(out_ptr, shape=[tl.cdiv(R, P0), tl.cdiv(C, P1), P0, P1], strides=[s0, s1, s2, s3],
                            offsets=[tl.program_id(0) * BR // P0, 0, 0, 0], block_shape=[BR // P0, BC // P1, P0, P1],
                            order=[3, 2, 1, 0])
    tl.store(out, tiles, boundary_check=(0, 1))


@triton.jit
def pack_columns_kernel(x_ptr, out_ptr, R, C, sr, sc, s0, s1, s2, s3, BR: tl.constexpr, BC: tl.constexpr,
                        P0: tl.constexpr, P1: tl.constexpr):
    """x [R, C] -> [C/P1, R/P0, P1, P0]: packed, then tiles and their contents transposed (B for an NT dot)."""
    block = tl.make_block_ptr(x_ptr, shape=[R, C], strides=[sr, sc], offsets=[0, tl.program_id(0) * BC],
                              block_shape=[BR, BC], order=[1, 0])
    tiles = smt.view(smt.descriptor_load(block, (0, 0)), (0, 0), (BR, BC), (P0, P1))
    tiles = tl.trans(tiles, 1, 0, 3, 2)
    out = tl.make_block_ptr(out_ptr, shape=[tl.cdiv(C, P1), tl.cdiv(R, P0), P1, P0], strides=[s0, s1, s2, s3],
                            offsets=[tl.program_id(0) * BC // P1, 0, 0, 0], block_shape=[BC // P1, BR // P0, P1, P0],
                            order=[3, 2, 1, 0])
    tl.store(out, tiles, boundary_check=(0, 1))


def packed_reference(x, p0, p1):
    r, c = x.shape
    padded = torch.zeros(triton.cdiv(r, p0) * p0, triton.cdiv(c, p1) * p1, dtype=x.dtype)
    padded[:r, :c] = x
    return padded.view(padded.shape[0] // p0, p0, padded.shape[1] // p1, p1).permute(0, 2, 1, 3).contiguous()


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_pack_rows(target, dtype):
    x = torch.randn(70, 40, dtype=dtype)
    out = torch.full((triton.cdiv(70, 16), triton.cdiv(40, 8), 16, 8), 9.0, dtype=dtype)
    pack_rows_kernel[(triton.cdiv(70, 32),)](x, out, 70, 40, *x.stride(), *out.stride(), BR=32, BC=64, P0=16, P1=8)
    assert torch.equal(out, packed_reference(x, 16, 8))


@pytest.mark.parametrize("transposed", [True, False])
def test_pack_columns(target, transposed):
    """The example's B packing: [K, N] -> [N/32, K/8, 32, 8] (transposed) or [K/8, N/32, 8, 32]."""
    x = torch.randn(40, 70, dtype=torch.float16)
    if transposed:
        out = torch.empty(triton.cdiv(70, 32), triton.cdiv(40, 8), 32, 8, dtype=torch.float16)
        pack_columns_kernel[(triton.cdiv(70, 64),)](x, out, 40, 70, *x.stride(), *out.stride(), BR=64, BC=64,
                                                    P0=8, P1=32)
        expected = packed_reference(x, 8, 32).permute(1, 0, 3, 2)
    else:
        out = torch.empty(triton.cdiv(40, 8), triton.cdiv(70, 32), 8, 32, dtype=torch.float16)
        pack_rows_kernel[(triton.cdiv(40, 64),)](x, out, 40, 70, *x.stride(), *out.stride(), BR=64, BC=128,
                                                 P0=8, P1=32)
        expected = packed_reference(x, 8, 32)
    assert torch.equal(out, expected)
