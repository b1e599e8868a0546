"""Atomics across program instances, which run concurrently on the grid's threads."""
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
