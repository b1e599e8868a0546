"""Atomics across program instances, which run concurrently on the grid's threads."""
import pytest
import torch
import triton
import triton.language as tl


@triton.jit
def histogram_kernel(x_ptr, hist_ptr, n, BINS: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0)
    tl.atomic_add(hist_ptr + x % BINS, 1, mask=mask)


def test_integer_atomic_add_from_many_programs(target):
    n = 5000
    x = torch.randint(0, 1000, (n,), dtype=torch.int32)
    hist = torch.zeros(16, dtype=torch.int32)
    histogram_kernel[(triton.cdiv(n, 64),)](x, hist, n, BINS=16, BLOCK=64)
    torch.testing.assert_close(hist, torch.bincount(x % 16, minlength=16).int())


@triton.jit
def float_sum_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.atomic_add(out_ptr, tl.sum(x, axis=0))


def test_float_atomic_add_on_a_scalar(target):
    n = 4000
    x = torch.ones(n)
    out = torch.zeros(1)
    float_sum_kernel[(triton.cdiv(n, 128),)](x, out, n, BLOCK=128)
    assert out.item() == n


@triton.jit
def max_min_kernel(x_ptr, max_ptr, min_ptr, old_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    slot = offs % 8
    old = tl.atomic_max(max_ptr + slot, x, mask=mask)
    tl.atomic_min(min_ptr + slot, x, mask=mask)
    tl.store(old_ptr + offs, old, mask=mask)


def test_float_atomic_max_min(target):
    n = 1000
    x = torch.randn(n)
    mx = torch.full((8,), -float("inf"))
    mn = torch.full((8,), float("inf"))
    old = torch.empty(n)
    max_min_kernel[(triton.cdiv(n, 128),)](x, mx, mn, old, n, BLOCK=128)
    groups = x.view(-1, 8) if n % 8 == 0 else None
    torch.testing.assert_close(mx, groups.max(0).values)
    torch.testing.assert_close(mn, groups.min(0).values)
    assert torch.all(old <= mx[torch.arange(n) % 8])


@triton.jit
def claim_kernel(owner_ptr, winners_ptr):
    pid = tl.program_id(0)
    previous = tl.atomic_cas(owner_ptr, -1, pid)
    tl.store(winners_ptr + pid, (previous == -1).to(tl.int32))


def test_atomic_cas_has_exactly_one_winner(target):
    owner = torch.full((1,), -1, dtype=torch.int32)
    winners = torch.zeros(64, dtype=torch.int32)
    claim_kernel[(64,)](owner, winners)
    assert winners.sum().item() == 1
    assert winners[owner.item()].item() == 1


@triton.jit
def xchg_kernel(x_ptr, new_ptr, old_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    old = tl.atomic_xchg(x_ptr + offs, tl.load(new_ptr + offs))
    tl.store(old_ptr + offs, old)


def test_atomic_exchange_returns_old_values(target):
    x = torch.arange(16, dtype=torch.float32)
    new = torch.randn(16)
    old = torch.empty(16)
    xchg_kernel[(1,)](x, new, old, BLOCK=16)
    torch.testing.assert_close(old, torch.arange(16, dtype=torch.float32))
    torch.testing.assert_close(x, new)


@triton.jit
def float_cas_kernel(x_ptr, old_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    old = tl.atomic_cas(x_ptr + offs, tl.full((BLOCK,), 0.0, x_ptr.dtype.element_ty),
                        tl.full((BLOCK,), 2.0, x_ptr.dtype.element_ty))
    tl.store(old_ptr + offs, old)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_float_atomic_cas_compares_bits(target, dtype):
    # Triton's test_tensor_atomic_cas on floats; -0.0 has other bits than 0.0, so it is not replaced
    x = torch.tensor([0.0, 1.0, -0.0, float("nan")] * 4, dtype=dtype)
    expected = torch.where((x == 0) & ~torch.signbit(x), torch.tensor(2.0, dtype=dtype), x)
    old = torch.empty_like(x)
    before = x.clone()
    float_cas_kernel[(2,)](x, old, BLOCK=8)
    assert torch.equal(old.view(torch.uint8), before.view(torch.uint8))
    assert torch.equal(x.view(torch.uint8), expected.view(torch.uint8))


@triton.jit
def locked_add_kernel(data_ptr, lock_ptr, BLOCK: tl.constexpr):
    # Triton's test_atomic_cas: a spin lock around a read-modify-write, tl.debug_barrier before the release
    ptrs = data_ptr + tl.arange(0, BLOCK)
    while tl.atomic_cas(lock_ptr, 0, 1) == 1:
        pass
    tl.store(ptrs, tl.load(ptrs) + 1.0)
    tl.debug_barrier()
    tl.atomic_xchg(lock_ptr, 0)


def test_spin_lock_with_debug_barrier(target):
    data = torch.zeros(64)
    lock = torch.zeros(1, dtype=torch.int32)
    locked_add_kernel[(500,)](data, lock, BLOCK=64)
    assert torch.equal(data, torch.full((64,), 500.0)) and lock.item() == 0
