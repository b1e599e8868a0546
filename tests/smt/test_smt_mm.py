"""spine-triton's smt matmul example (python/examples/test_smt_mm.py in spacemit-com/spine-triton, MIT
licensed), its kernel unchanged, in each of its arrangements: one program for the whole matrix, SPLIT_M
(sub-blocks of rows in a parallel loop), SPLIT_MN (sub-blocks of rows and columns, B staged in an smt.alloc
buffer, mbarriers) and SPLIT_K (a K loop accumulating `acc += smt.dot(a, b)` into a packed accumulator);
fp16 and fp32 with spine-triton's legal micro tiles, ragged M, N and K, against torch.mm."""
import pytest
import torch
import triton
import triton.language as tl
import triton.language.extra.smt as smt


@triton.jit
def mm_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    BLOCK_SIZE_M: tl.constexpr,
    BLOCK_SIZE_N: tl.constexpr,
    BLOCK_SIZE_K: tl.constexpr,
    SPLIT_M: tl.constexpr,
    SPLIT_MN: tl.constexpr,
    SPLIT_K: tl.constexpr,
    SUB_BLK_M: tl.constexpr,
    SUB_BLK_N: tl.constexpr,
    SUB_BLK_K: tl.constexpr,
    MICRO_M: tl.constexpr,
    MICRO_K: tl.constexpr,
    MICRO_N: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    a_block_ptr = tl.make_block_ptr(
        base=a_ptr,
        shape=[M, K],
        strides=[stride_am, stride_ak],
        offsets=[pid_m * BLOCK_SIZE_M, 0],
        block_shape=[BLOCK_SIZE_M, BLOCK_SIZE_K],
        order=[1, 0],
    )

    b_block_ptr = tl.make_block_ptr(
        base=b_ptr,
        shape=[K, N],
        strides=[stride_bk, stride_bn],
        offsets=[0, pid_n * BLOCK_SIZE_N],
        block_shape=[BLOCK_SIZE_K, BLOCK_SIZE_N],
        order=[1, 0],
    )

    if SPLIT_M:
        b_descriptor_load = smt.descriptor_load(b_block_ptr, (0, 0))
        b = smt.view(b_descriptor_load, (0, 0), (BLOCK_SIZE_K, BLOCK_SIZE_N), (MICRO_K, MICRO_N))
        sub_num = (min(BLOCK_SIZE_M, M - BLOCK_SIZE_M * pid_m) + SUB_BLK_M - 1) // SUB_BLK_M
        for s in smt.parallel(0, sub_num):
            a_descriptor_load = smt.descriptor_load(a_block_ptr, (0, 0))
            a = smt.view(a_descriptor_load, (s * SUB_BLK_M, 0), (SUB_BLK_M, BLOCK_SIZE_K), (MICRO_M, MICRO_K))
            accumulator = smt.dot(a, b)
            accumulator = smt.view(accumulator, (0, 0), (SUB_BLK_M, BLOCK_SIZE_N), (1, 1))
            c = accumulator.to(c_ptr.dtype.element_ty)
            c_block_ptr = tl.make_block_ptr(
                base=c_ptr,
                shape=[M, N],
                strides=[stride_cm, stride_cn],
                offsets=[pid_m * BLOCK_SIZE_M + s * SUB_BLK_M, pid_n * BLOCK_SIZE_N],
                block_shape=[SUB_BLK_M, BLOCK_SIZE_N],
                order=[1, 0],
            )
            tl.store(c_block_ptr, c, boundary_check=(0, 1))

    elif SPLIT_MN:
        sub_num_m = (min(BLOCK_SIZE_M, M - BLOCK_SIZE_M * pid_m) + SUB_BLK_M - 1) // SUB_BLK_M
        sub_num_n = (min(BLOCK_SIZE_N, N - BLOCK_SIZE_N * pid_n) + SUB_BLK_N - 1) // SUB_BLK_N
        total_sub_blocks = sub_num_m * sub_num_n
        b_alloc_ptr = smt.alloc(shape=[BLOCK_SIZE_K, BLOCK_SIZE_N])
        b_alloc_view_ptr = smt.view(b_alloc_ptr, (0, 0), (BLOCK_SIZE_K, BLOCK_SIZE_N), (MICRO_K, MICRO_N))
        bar0 = smt.mbarrier(flag=0, expect_count=1)
        bar1 = smt.mbarrier(flag=0, expect_count=1)
        for s in smt.parallel(0, total_sub_blocks):
            s_m = s // sub_num_n
            s_n = s % sub_num_n
            a_descriptor_load = smt.descriptor_load(a_block_ptr, (0, 0))
            a = smt.view(a_descriptor_load, (s_m * SUB_BLK_M, 0), (SUB_BLK_M, BLOCK_SIZE_K), (MICRO_M, MICRO_K))
            b_alloc_sub_ptr = smt.view(b_alloc_view_ptr, (0, s_n * SUB_BLK_N), (BLOCK_SIZE_K, SUB_BLK_N))
            if s_m == 0:
                b_descriptor_load = smt.descriptor_load(b_block_ptr, (0, 0))
                b = smt.view(b_descriptor_load, (0, s_n * SUB_BLK_N), (BLOCK_SIZE_K, SUB_BLK_N), (MICRO_K, MICRO_N))
                tl.store(b_alloc_sub_ptr, b, boundary_check=(0, 1, 2, 3))
                if s_n == 0:
                    smt.barrier_arrive(bar0)
                elif s_n == 1:
                    smt.barrier_arrive(bar1)
            else:
                if s_n == 0:
                    smt.barrier_wait(bar0, flag=1)
                elif s_n == 1:
                    smt.barrier_wait(bar1, flag=1)

            b_alloc = tl.load(b_alloc_sub_ptr, boundary_check=(0, 1, 2, 3))
            accumulator = smt.dot(a, b_alloc)
            accumulator = smt.view(accumulator, (0, 0), (SUB_BLK_M, SUB_BLK_N), (1, 1))
            c = accumulator.to(c_ptr.dtype.element_ty)
            c_block_ptr = tl.make_block_ptr(
                base=c_ptr,
                shape=[M, N],
                strides=[stride_cm, stride_cn],
                offsets=[pid_m * BLOCK_SIZE_M + s_m * SUB_BLK_M, pid_n * BLOCK_SIZE_N + s_n * SUB_BLK_N],
                block_shape=[SUB_BLK_M, SUB_BLK_N],
                order=[1, 0],
            )
            tl.store(c_block_ptr, c, boundary_check=(0, 1))

    elif SPLIT_K:
        accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=a_ptr.type.element_ty)
        accumulator = smt.view(accumulator, (0, 0), (BLOCK_SIZE_M, BLOCK_SIZE_N), (MICRO_M, MICRO_N))
        sub_num = (K + SUB_BLK_K - 1) // SUB_BLK_K
        for k in tl.range(0, sub_num):
            a_descriptor_load = smt.descriptor_load(a_block_ptr, (0, 0))
            a = smt.view(a_descriptor_load, (0, k * SUB_BLK_K), (BLOCK_SIZE_M, SUB_BLK_K), (MICRO_M, MICRO_K))
            b_descriptor_load = smt.descriptor_load(b_block_ptr, (0, 0))
            b = smt.view(b_descriptor_load, (k * SUB_BLK_K, 0), (SUB_BLK_K, BLOCK_SIZE_N), (MICRO_K, MICRO_N))
            accumulator += smt.dot(a, b)
        accumulator = smt.view(accumulator, (0, 0), (BLOCK_SIZE_M, BLOCK_SIZE_N), (1, 1))
        c = accumulator.to(c_ptr.dtype.element_ty)

        c_block_ptr = tl.make_block_ptr(
            base=c_ptr,
            shape=[M, N],
            strides=[stride_cm, stride_cn],
            offsets=[pid_m * BLOCK_SIZE_M, pid_n * BLOCK_SIZE_N],
            block_shape=[BLOCK_SIZE_M, BLOCK_SIZE_N],
            order=[1, 0],
        )
        tl.store(c_block_ptr, c, boundary_check=(0, 1))


MICRO = {torch.float16: (16, 8, 32), torch.float32: (8, 8, 16)}   # (MICRO_M, MICRO_K, MICRO_N)
SPLITS = {"single": dict(SPLIT_M=0, SPLIT_MN=0, SPLIT_K=1), "split_m": dict(SPLIT_M=1, SPLIT_MN=0, SPLIT_K=0),
          "split_mn": dict(SPLIT_M=0, SPLIT_MN=1, SPLIT_K=0), "split_k": dict(SPLIT_M=0, SPLIT_MN=0, SPLIT_K=1)}


def smt_mm(a, b, split: str, block_m: int = 32, block_n: int = 64, sub_k: int = 32):
    """The example's launcher, with the tile sizes as parameters; "single" is one program for everything."""
    (m, k), n = a.shape, b.shape[1]
    micro_m, micro_k, micro_n = MICRO[a.dtype]
    block_k = triton.next_power_of_2(k)
    if split == "single":
        block_m, block_n, sub_k = triton.next_power_of_2(m), triton.next_power_of_2(n), block_k
    c = torch.empty((m, n), dtype=a.dtype)
    grid = (triton.cdiv(m, block_m), triton.cdiv(n, block_n))
    mm_kernel[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                    BLOCK_SIZE_M=block_m, BLOCK_SIZE_N=block_n, BLOCK_SIZE_K=block_k, SUB_BLK_M=16,
                    SUB_BLK_N=max(32, micro_n), SUB_BLK_K=sub_k, MICRO_M=micro_m, MICRO_K=micro_k,
                    MICRO_N=micro_n, **SPLITS[split])
    return c


def check(c, a, b):
    expected = torch.mm(a.float(), b.float())
    if a.dtype == torch.float32:
        torch.testing.assert_close(c, expected, rtol=1e-4, atol=1e-4)
    else:
        torch.testing.assert_close(c.float(), expected, rtol=1e-2, atol=2e-2)
        torch.testing.assert_close(c, torch.mm(a, b), rtol=1e-2, atol=1e-1)   # the example's own check


@pytest.mark.parametrize("split", list(SPLITS))
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_smt_mm(target, split, dtype):
    m, n, k = 45, 70, 50
    a = torch.randn(m, k).to(dtype)
    b = torch.randn(k, n).to(dtype)
    check(smt_mm(a, b, split), a, b)


@pytest.mark.parametrize("split", ["split_m", "split_k"])
def test_smt_mm_strided_inputs(target, split):
    a = torch.randn(40, 33).t()          # strides (1, 33)
    b = torch.randn(80, 30)[::2]          # row stride 60
    check(smt_mm(a, b, split), a, b)


@pytest.mark.parametrize("split", ["split_mn", "split_k"])
def test_smt_mm_bounds_checked(target, split, monkeypatch):
    """With debug (every access checked against its argument's extent) the example still runs; its
    scratch buffer is not an argument and goes unchecked."""
    monkeypatch.setenv("TRITON_DEBUG", "1")
    a = torch.randn(45, 50)
    b = torch.randn(50, 70)
    check(smt_mm(a, b, split), a, b)
