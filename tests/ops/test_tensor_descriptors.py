"""Tensor descriptors, built in the kernel or passed from the host (triton.tools.tensor_descriptor)."""
import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor


@triton.jit
def in_kernel_descriptor_kernel(x_ptr, out_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    src = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    dst = tl.make_tensor_descriptor(out_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    m0 = tl.program_id(0) * BM
    n0 = tl.program_id(1) * BN
    dst.store([m0, n0], src.load([m0, n0]) * 2.0)


def test_descriptor_made_in_the_kernel_with_edge_tiles(target):
    m, n = 37, 21
    x = torch.randn(m, n)
    out = torch.zeros(m, n)
    in_kernel_descriptor_kernel[(triton.cdiv(m, 16), triton.cdiv(n, 8))](x, out, m, n, BM=16, BN=8)
    torch.testing.assert_close(out, x * 2)


@triton.jit
def host_descriptor_kernel(in_desc, out_desc, BM: tl.constexpr, BN: tl.constexpr):
    m0 = tl.program_id(0) * BM
    tile = in_desc.load([m0, 0])
    out_desc.store([m0, 0], tile + 1.0)


def test_host_descriptors(target):
    x = torch.randn(20, 16)
    out = torch.zeros(20, 16)
    host_descriptor_kernel[(2,)](TensorDescriptor.from_tensor(x, [16, 16]), TensorDescriptor.from_tensor(out, [16, 16]),
                                 BM=16, BN=16)
    torch.testing.assert_close(out, x + 1)


@triton.jit
def descriptor_sum_kernel(desc, out_ptr, M, BM: tl.constexpr, BN: tl.constexpr):
    acc = tl.zeros((BN,), dtype=tl.float32)
    for m0 in range(0, M, BM):
        acc += tl.sum(desc.load([m0, 0]), axis=0)
    tl.store(out_ptr + tl.arange(0, BN), acc)


def test_host_descriptor_loaded_in_a_loop_pads_with_zeros(target):
    x = torch.randn(50, 8)
    out = torch.empty(8)
    descriptor_sum_kernel[(1,)](TensorDescriptor.from_tensor(x, [16, 8]), out, 50, BM=16, BN=8)
    torch.testing.assert_close(out, x.sum(0), rtol=1e-5, atol=1e-5)
