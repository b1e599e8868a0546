"""Matrix products as Triton kernels for Inductor's CPU Triton backend.

Inductor lowers aten.mm/addmm/bmm on CPU to calls into ATen (MKL/oneDNN) and never emits Triton for them;
the decompositions in spine/inductor/decompositions.py route them here instead. `matmul` launches one
Triton kernel through torch.library.wrap_triton, so Inductor sees a user-defined Triton kernel in its graph
and compiles it with Spine like the kernels it generates itself.

The kernel multiplies a (B1, B2, M, K) by a (B1, B2, K, N) operand, given by arbitrary strides (a batch
dimension of size 1 has stride 0), into a (B1, B2, M, N) result whose rows have unit stride, optionally
adding a bias row: two batch dimensions take attention's (batch, head) views as they are, without copies,
and its result may be laid out (batch, row, head, column), as models read it back."""
import torch
import triton
import triton.language as tl
from torch._higher_order_ops.triton_kernel_wrap import (TraceableTritonKernelWrapper, TracingTritonHOPifier,
                                                        kernel_side_table, triton_kernel_wrapper_functional)


@triton.jit
def matmul_kernel(a_ptr, b_ptr, bias_ptr, c_ptr, M, N, K, B2,
                  stride_a1, stride_a2, stride_am, stride_ak,
                  stride_b1, stride_b2, stride_bk, stride_bn,
                  stride_c1, stride_c2, stride_cm,
                  HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    batch = tl.program_id(2)
    b1 = batch // B2
    b2 = batch % B2
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a = a_ptr + b1 * stride_a1 + b2 * stride_a2 + rm[:, None] * stride_am + rk[None, :] * stride_ak
    b = b_ptr + b1 * stride_b1 + b2 * stride_b2 + rk[:, None] * stride_bk + rn[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a_tile = tl.load(a, mask=(rm[:, None] < M) & (rk[None, :] < K - k), other=0.0)
        b_tile = tl.load(b, mask=(rk[:, None] < K - k) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a_tile, b_tile)
        a += BLOCK_K * stride_ak
        b += BLOCK_K * stride_bk
    if HAS_BIAS:
        acc += tl.load(bias_ptr + rn, mask=rn < N, other=0.0)[None, :].to(tl.float32)
    c = c_ptr + b1 * stride_c1 + b2 * stride_c2 + rm[:, None] * stride_cm + rn[None, :]
    tl.store(c, acc.to(c_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


class _FunctionalLaunch(TracingTritonHOPifier):
    """Records a kernel launch in the graph being traced as triton_kernel_wrapper_functional: the kernel
    returns fresh copies of the tensors it writes (`outputs`), which Inductor turns back into in-place
    writes where nothing else reads them. (torch.library.wrap_triton records the mutating form, which
    decompositions cannot use: they run below functionalization, and the write would be lost.)"""

    def __init__(self, outputs):
        self.outputs = outputs

    def call_HOP(self, variable, grids, combined_args, tx):
        graphable, constant_args_idx = self.store_non_graphable_args(combined_args)
        return triton_kernel_wrapper_functional(
            kernel_idx=variable.kernel_idx, constant_args_idx=constant_args_idx, grid=grids,
            tma_descriptor_metadata={}, kwargs=graphable, tensors_to_clone=list(self.outputs))


def launch(kernel, grid, outputs, **kwargs):
    """kernel[grid](**kwargs) as a functional graph node; returns the written tensors named in outputs."""
    wrapper = TraceableTritonKernelWrapper(kernel, kernel_side_table.add_kernel(kernel), grid)
    written = _FunctionalLaunch(outputs).call_triton_kernel(wrapper, (), kwargs, None)
    return [written[name] for name in outputs]


def _batch_strides(t):
    """(size, stride) of the two batch dimensions of a 2-, 3- or 4-D operand (missing ones: 1, 0)."""
    sizes, strides = list(t.shape[:-2]), list(t.stride()[:-2])
    while len(sizes) < 2:
        sizes.insert(0, 1)
        strides.insert(0, 0)
    return sizes, strides


def _block_sizes(m, n, k):
    """Rows: M rounded up to a power of two between 16 and 256, from the size seen when compiling (M is the
    tokens, often symbolic: the hint adds no guard, and other sizes stay correct). A block's rows past M are
    neither read nor computed (the packed matmul's row bound), but each block of rows packs B again: MiniLM's
    products of 130 rows, one thread, ran at 0.88-1.00 of torch.addmm's speed in one block of 256 rows,
    0.84-0.97 in blocks of 128 and 0.81-0.91 in blocks of 64. Columns and steps of k: 64 where the weights
    have that many (static sizes), which halves the packing per multiply-add against 32."""
    from torch.fx.experimental.symbolic_shapes import optimization_hint

    def wide(size):
        return 64 if isinstance(size, int) and size >= 64 else 32
    rows = 16
    while rows < min(optimization_hint(m, fallback=64), 256):
        rows *= 2
    return rows, wide(n), wide(k)


def matmul(a, b, bias=None, out=None):
    """a (..., M, K) @ b (..., K, N) [+ bias (N,)], with at most two batch dimensions of equal sizes; into
    `out` when given (a fresh tensor of the result's shape, any strides but unit ones along N), else into
    a contiguous result."""
    (b1, b2), (sa1, sa2) = _batch_strides(a)
    _, (sb1, sb2) = _batch_strides(b)
    m, k = a.shape[-2:]
    n = b.shape[-1]
    if out is None:
        out = torch.empty((*a.shape[:-2], m, n), dtype=a.dtype, device=a.device)
    _, (sc1, sc2) = _batch_strides(out)
    block_m, block_n, block_k = _block_sizes(m, n, k)
    grid = (triton.cdiv(m, block_m), triton.cdiv(n, block_n), b1 * b2)
    out, = launch(matmul_kernel, grid, ["c_ptr"],
                  a_ptr=a, b_ptr=b, bias_ptr=bias if bias is not None else a, c_ptr=out, M=m, N=n, K=k, B2=b2,
                  stride_a1=sa1, stride_a2=sa2, stride_am=a.stride(-2), stride_ak=a.stride(-1),
                  stride_b1=sb1, stride_b2=sb2, stride_bk=b.stride(-2), stride_bn=b.stride(-1),
                  stride_c1=sc1, stride_c2=sc2, stride_cm=out.stride(-2),
                  HAS_BIAS=bias is not None, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k)
    return out
