"""smt.alloc and smt.alloc_copies: scratch buffers private to a program, their (packed) views as block
pointers, the default element type; the synchronisation calls of parallel loops."""
import torch
import triton
import triton.language as tl
import triton.language.extra.smt as smt


@triton.jit
def stage_kernel(x_ptr, out_ptr, R: tl.constexpr, C: tl.constexpr, P0: tl.constexpr, P1: tl.constexpr,
                 HALF: tl.constexpr):
    """Store x packed into a buffer half by half (columns), read it back through another view, unpacked."""
    x = tl.load(x_ptr + tl.arange(0, R)[:, None] * C + tl.arange(0, C)[None, :])
    buffer = smt.alloc(shape=[R, C])
    packed = smt.view(buffer, (0, 0), (R, C), (P0, P1))
    for h in smt.parallel(0, 2):
        half = smt.view(packed, (0, h * HALF), (R, HALF))
        tl.store(half, smt.view(x, (0, h * HALF), (R, HALF), (P0, P1)), boundary_check=(0, 1, 2, 3))
    rows = smt.view(buffer, (0, 0), (R, C), (1, 1))
    tl.store(out_ptr + tl.arange(0, R)[:, None] * C + tl.arange(0, C)[None, :], tl.load(rows) * 2)


def test_packed_views_of_a_buffer(target):
    """A packed view writes the buffer's row-major memory: an unpacked view of it reads the matrix back."""
    x = torch.randn(16, 32, dtype=torch.float16)
    out = torch.empty_like(x)
    stage_kernel[(3,)](x, out, R=16, C=32, P0=8, P1=4, HALF=16)
    assert out.dtype == torch.float16 and torch.equal(out, x * 2)   # the buffer took x's type


@triton.jit
def copies_kernel(x_ptr, out_ptr, N: tl.constexpr, COPIES: tl.constexpr):
    buffers = smt.alloc_copies([1, N], tl.float32, storage=smt.storage_kind.SMEM, copies=COPIES)
    cols = tl.arange(0, N)[None, :]
    for i in range(COPIES):
        tl.store(buffers[i], tl.load(x_ptr + cols) + i)
    total = tl.zeros((1, N), dtype=tl.float32)
    for i in range(COPIES):
        total += tl.load(buffers[i])
    tl.store(out_ptr + cols, total)


def test_alloc_copies(target):
    x = torch.randn(16)
    out = torch.empty(16)
    copies_kernel[(1,)](x, out, N=16, COPIES=3)
    torch.testing.assert_close(out, 3 * x + 3)


@triton.jit
def sync_kernel(out_ptr):
    bar = smt.mbarrier(flag=0, expect_count=1)
    smt.barrier_set_expect(bar, 1)
    total = tl.zeros((), dtype=tl.int32)
    for s in smt.parallel(0, 4):
        smt.barrier_arrive(bar)
        smt.barrier_wait(bar, flag=1)
        smt.compile_hint(out_ptr, "spine.unused", 1)
        total += s
    tl.store(out_ptr, total)
    tl.store(out_ptr + 1, smt.get_num_of_thread())


def test_parallel_loops_and_barriers(target):
    out = torch.zeros(2, dtype=torch.int32)
    sync_kernel[(1,)](out)
    assert out[0].item() == 6 and out[1].item() >= 1   # a team's size: tests/smt/test_parallel.py


@triton.jit
def big_buffer_kernel(x_ptr, out_ptr, R: tl.constexpr, C: tl.constexpr):
    """A buffer above the stack limit lives on the heap (and is freed: the kernel runs many programs)."""
    buffer = smt.alloc(shape=[R, C], type=tl.float32, storage="l2")     # spine-triton's keyword
    offs = tl.arange(0, R)[:, None] * C + tl.arange(0, C)[None, :]
    tl.store(buffer, tl.load(x_ptr + offs))
    tl.store(out_ptr + offs + tl.program_id(0) * R * C, tl.load(buffer))


def test_heap_buffer(target):
    x = torch.randn(128, 256)
    out = torch.empty(4, 128, 256)
    big_buffer_kernel[(4,)](x, out, R=128, C=256)
    assert torch.equal(out, x.expand(4, 128, 256))
