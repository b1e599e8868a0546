"""spine-triton's smt matmul (python/examples/test_smt_mm.py in spacemit-com/spine-triton, MIT licensed),
its kernel unchanged: blocks loaded through block pointers, viewed as packed micro tiles, multiplied with
smt.dot (a packed matmul with a register-blocked vector micro-kernel), unpacked and stored.

    .venv/bin/python examples/04_smt_matmul.py                    # riscv64 under QEMU
    SPINE_TARGET=host .venv/bin/python examples/04_smt_matmul.py  # this machine

Prints the error against torch.mm and the kernel's throughput (under QEMU: of the emulator, not of a
RISC-V core)."""
import os

import torch
import triton
import triton.language as tl
import triton.language.extra.smt as smt

from _report import activate, time_per_launch


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


def triton_mm(a, b, block: int):
    """The example's launcher (SPLIT_K, fp32 micro tiles (8, 8, 16)), the whole K at once."""
    m, k = a.shape
    n = b.shape[1]
    c = torch.empty((m, n), dtype=a.dtype)
    block_k = triton.next_power_of_2(k)
    grid = (triton.cdiv(m, block), triton.cdiv(n, block))
    mm_kernel[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                    BLOCK_SIZE_M=block, BLOCK_SIZE_N=block, BLOCK_SIZE_K=block_k, SPLIT_M=0, SPLIT_MN=0, SPLIT_K=1,
                    SUB_BLK_M=8, SUB_BLK_N=64, SUB_BLK_K=block_k, MICRO_M=8, MICRO_N=16, MICRO_K=8)
    return c


def main():
    target = activate()
    size, block = (512, 256) if target == "host" else (int(os.environ.get("SMT_SIZE", 128)), 128)
    a, b = torch.randn(size, size), torch.randn(size, size)
    c = triton_mm(a, b, block)
    err = (c - torch.mm(a, b)).abs().max().item()
    seconds = time_per_launch(lambda: triton_mm(a, b, block), repeat=20 if target == "host" else 3)
    verdict = "OK" if err <= 1e-3 else "MISMATCH"
    print(f"smt matmul fp32 {size}x{size}x{size} target={target:<8} max|err|={err:.3e}  "
          f"{seconds * 1e3:8.2f} ms/launch  {2 * size ** 3 / seconds / 1e9:7.2f} GFLOP/s  {verdict}")
    if verdict != "OK":
        raise SystemExit(1)


if __name__ == "__main__":
    main()
