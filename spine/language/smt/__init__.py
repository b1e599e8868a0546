"""smt: spine-triton's matrix-tile extension (`import triton.language.extra.smt as smt`).

Kernels load blocks, view them as packed micro tiles and multiply the tiles; Spine lowers the product to a
packed matmul whose inner loop is a register-blocked vector micro-kernel (RVV on riscv64, AVX-512/AVX2 on
x86-64; spine/microkernels.py says which where).

    descriptor_load(block_ptr, offsets)      the block a block pointer describes, moved by offsets
                                             (elements outside the tensor read as zero)
    view(base, offsets, shape, packed_size)  the sub-block [offsets, offsets + shape) of a 2-D tensor, a
                                             packed 4-D tensor or a scratch buffer; with packed_size
                                             (p0, p1) packed into micro tiles [S0/p0, S1/p1, p0, p1];
                                             (1, 1) unpacks to 2-D (tensor_views.py, buffers.py)
    dot(a, b, acc=None, out_dtype=None)      [M1, K1, m, k] x [K1, N1, k, n] -> [M1, N1, m, n], summed in
                                             fp32 (int32 for int8); `acc += dot(a, b)` is fused (matmul.py)
    parallel(start, end, ...)                a loop whose iterations run concurrently on threads of the
                                             program when cores are idle (sync.py: team size, barriers)
    alloc(shape, type=None, storage="l2")    a row-major scratch buffer private to the program instance,
    alloc_copies(shape, dtype, storage, copies)  returned as a block pointer; `alloc_copies(...)[i]` is the
                                             i-th of several (buffers.py); `storage` is one of
                                             storage_kind's names, all ordinary memory on a CPU
    mbarrier, mbarrier_copies, barrier_arrive, barrier_wait, barrier_set_expect, get_num_of_thread,
    compile_hint                             synchronisation of parallel iterations and hints (sync.py);
                                             global_mbarrier is refused with the reason (sync.py)

Any micro tile whose sizes divide the block works; the legal tiles of spine-triton's matrix engine, fp16
(16, 8, 32) and fp32 (8, 8, 16) as (m, k, n), are the ones to use for code that must also run there.

Each operation reaches TTIR as ordinary Triton (block pointers and loads) or as a call to a reserved
device function in reference.py, which is also its plain-Triton definition; the conversion recognises
those calls by name (to_linalg/smt_calls.py). Not supported: triton's interpreter (TRITON_INTERPRET=1),
`view(..., destination=)` and `descriptor_load(..., destination)` (in-place forms).
"""
from __future__ import annotations

from triton.language import core as tl
from triton.language.core import builtin

from . import buffers, matmul, sync, tensor_views
from .checks import check
from .sync import parallel

__all__ = ["descriptor_load", "view", "dot", "parallel", "alloc", "alloc_copies", "mbarrier", "mbarrier_copies",
           "barrier_arrive", "barrier_wait", "barrier_set_expect", "get_num_of_thread", "global_mbarrier",
           "compile_hint", "storage_kind"]


class storage_kind:
    """The storages `alloc` and `alloc_copies` take (`storage=`), as spine-triton names them: its L2 buffer
    and its shared memory. A CPU program's scratch buffers are ordinary memory whichever is named."""
    L2 = "l2"
    SMEM = "smem"


@builtin
def descriptor_load(base, offsets, _semantic=None):
    """The block `base` (a block pointer) describes, moved by `offsets`; out-of-bounds elements are zero."""
    return buffers.descriptor_load(base, tl._unwrap_if_constexpr(offsets), _semantic)


@builtin
def view(base, offsets, shape, packed_size=None, _semantic=None, _generator=None):
    """The sub-block [offsets, offsets + shape) of `base`, packed into micro tiles of `packed_size`."""
    offsets = tl._unwrap_if_constexpr(offsets)
    packed_size = tl._unwrap_if_constexpr(packed_size)
    if isinstance(base, tl.tensor) and base.type.is_ptr():
        return buffers.view_pointer(base, offsets, shape, packed_size, _semantic)
    check(isinstance(base, tl.tensor), f"smt.view expects a tensor or a scratch buffer, got {type(base).__name__}")
    return tensor_views.view_tensor(base, offsets, shape, packed_size, _semantic, _generator)


@builtin
def dot(a_packed, b_packed, acc=None, out_dtype=None, _semantic=None, _generator=None):
    """Packed a [M1, K1, m, k] times packed b [K1, N1, k, n] -> [M1, N1, m, n] (plus acc)."""
    return matmul.packed_dot(a_packed, b_packed, tl._unwrap_if_constexpr(acc), out_dtype, _semantic, _generator)


@builtin
def alloc(shape, type=None, storage=storage_kind.L2, _semantic=None, _generator=None, scope=None):
    """A scratch buffer of `shape` (`type` defaults to the kernel's first pointer argument's element type).
    `scope` is an older name of `storage`."""
    shape = tl._unwrap_if_constexpr(shape)
    base = buffers.allocate(shape, type, scope or storage, 1, _semantic, _generator)
    return buffers.whole_buffer(base, [tl._unwrap_if_constexpr(s) for s in shape], _semantic)


@builtin
def alloc_copies(shape, dtype=None, storage=storage_kind.L2, copies=1, _semantic=None, _generator=None, scope=None):
    """`copies` scratch buffers of `shape`; index the result to get a block pointer to one of them."""
    storage = scope or storage
    shape = [tl._unwrap_if_constexpr(s) for s in tl._unwrap_if_constexpr(shape)]
    copies = tl._unwrap_if_constexpr(copies)
    check(isinstance(copies, int) and copies >= 1, f"alloc_copies copies must be a positive integer, got {copies}")
    base = buffers.allocate(shape, dtype, storage, copies, _semantic, _generator)
    return buffers.scratch_copies(base.handle, buffers.scratch_copies_type(base.type.element_ty, tuple(shape), copies))


@builtin
def mbarrier(flag=tl.constexpr(0), arrive_count=tl.constexpr(0), transaction_count=tl.constexpr(0),
             expect_count=tl.constexpr(1), _semantic=None, _generator=None):
    """A barrier between parallel iterations expecting `expect_count` arrivals (an int64 handle)."""
    return sync.mbarrier(flag, arrive_count, transaction_count, expect_count, _semantic, _generator)


@builtin
def mbarrier_copies(flag=tl.constexpr(0), arrive_count=tl.constexpr(0), transaction_count=tl.constexpr(0),
                    expect_count=tl.constexpr(1), copies=1, _semantic=None, _generator=None):
    """`copies` barriers, each expecting `expect_count` arrivals; `bars[i]` is the i-th one's handle."""
    return sync.mbarrier_copies(flag, arrive_count, transaction_count, expect_count, copies, _semantic, _generator)


@builtin
def global_mbarrier(id, _semantic=None):
    """Refused, with the reason (sync.py)."""
    sync.global_mbarrier(id)


@builtin
def barrier_arrive(bar, _semantic=None, _generator=None):
    """One arrival at `bar`."""
    sync.barrier_arrive(bar, _generator)


@builtin
def barrier_wait(bar, flag=tl.constexpr(0), arrive_count=tl.constexpr(0), _semantic=None, _generator=None):
    """Waits until `bar` has the arrivals it expects (sync.py: semantics)."""
    sync.barrier_wait(bar, _generator)


@builtin
def barrier_set_expect(bar, expect_count=tl.constexpr(1), _semantic=None, _generator=None):
    sync.barrier_set_expect(bar, expect_count, _semantic, _generator)


@builtin
def get_num_of_thread(_semantic=None, _generator=None):
    """The number of threads this program's parallel loops run on (sync.py says exactly)."""
    return sync.get_num_of_thread(_generator)


@builtin
def compile_hint(ptr, hint_name, hint_val=None, _semantic=None):
    sync.compile_hint(ptr, hint_name, hint_val)
