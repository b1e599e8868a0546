"""Early returns: triton's frontend emits cf.cond_br / cf.br between blocks for an `if` that returns; the
conversion follows the CFG and lifts it into scf (to_linalg/branches.py)."""
import itertools

import pytest
import torch
import triton
import triton.language as tl


def scalar(value, dtype=torch.int32):
    return torch.full((1,), value, dtype=dtype)


@triton.jit
def nested_return_kernel(c1_ptr, c2_ptr, c3_ptr, out_ptr):
    val = 0
    if tl.load(c1_ptr):
        if tl.load(c2_ptr):
            val = 1
        else:
            return
    else:
        if tl.load(c3_ptr):
            val = 2
        else:
            val = 3
    tl.store(out_ptr, val)


def test_return_inside_nested_if_else(target):
    for c1, c2, c3 in itertools.product([True, False], repeat=3):
        out = scalar(-1)
        nested_return_kernel[(1,)](scalar(c1), scalar(c2), scalar(c3), out)
        expected = (1 if c2 else -1) if c1 else (2 if c3 else 3)
        assert out.item() == expected, (c1, c2, c3)


@triton.jit
def guarded_tail_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    # Programs past the end return before touching memory; the others scale and store a tile, with a
    # loop after the return (scf inside the lifted region).
    pid = tl.program_id(0)
    if pid * BLOCK >= n:
        return
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    acc = tl.load(x_ptr + offs, mask=mask)
    for _ in range(3):
        acc = acc * 2.0
    tl.store(out_ptr + offs, acc, mask=mask)


def test_early_return_then_loop(target):
    x = torch.randn(100)
    out = torch.full((160,), -7.0)
    guarded_tail_kernel[(5,)](x, out, 100, BLOCK=32)
    torch.testing.assert_close(out[:100], x * 8)
    assert torch.all(out[100:] == -7.0)


@triton.jit
def pointer_through_branches_kernel(x_ptr, out_ptr, mode_ptr, BLOCK: tl.constexpr):
    # The pointer reaching the store is a block argument: the same strides on both edges (carried as an
    # offset), a scalar pointer too.
    offs = tl.arange(0, BLOCK)
    mode = tl.load(mode_ptr)
    ptrs = out_ptr + offs
    flag_ptr = out_ptr + BLOCK
    if mode == 0:
        return
    elif mode == 1:
        ptrs = ptrs + BLOCK + 1
        flag_ptr = flag_ptr - BLOCK
    else:
        ptrs = ptrs + 2 * BLOCK + 1
    tl.store(ptrs, tl.load(x_ptr + offs))
    tl.store(flag_ptr, -1.0)


@pytest.mark.parametrize("mode", [0, 1, 2])
def test_pointer_block_arguments(target, mode):
    block = 8
    x = torch.randn(block)
    out = torch.zeros(3 * block + 1)
    pointer_through_branches_kernel[(1,)](x, out, scalar(mode), BLOCK=block)
    expected = torch.zeros(3 * block + 1)
    if mode == 1:
        expected[block + 1:2 * block + 1] = x
        expected[0] = -1.0
    elif mode == 2:
        expected[2 * block + 1:] = x
        expected[block] = -1.0
    torch.testing.assert_close(out, expected)


@triton.jit
def gathered_pointer_kernel(x_ptr, out_ptr, mode_ptr, BLOCK: tl.constexpr):
    # Different strides on the two edges: the pointer crosses as a gather.
    offs = tl.arange(0, BLOCK)
    mode = tl.load(mode_ptr)
    if mode == 0:
        return
    if mode == 1:
        ptrs = out_ptr + offs
    else:
        ptrs = out_ptr + offs * 2
    tl.store(ptrs, tl.load(x_ptr + offs))


@pytest.mark.parametrize("mode", [0, 1, 2])
def test_pointer_with_other_strides_per_branch(target, mode):
    x = torch.randn(8)
    out = torch.zeros(16)
    gathered_pointer_kernel[(1,)](x, out, scalar(mode), BLOCK=8)
    expected = torch.zeros(16)
    if mode:
        expected[::mode][:8] = x
    torch.testing.assert_close(out, expected)


@triton.jit
def tensors_through_branches_kernel(x_ptr, out_ptr, mask_out_ptr, mode_ptr, BLOCK: tl.constexpr):
    # A float tile and a boolean tile (carried as bytes) are block arguments.
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    mode = tl.load(mode_ptr)
    tile = x
    keep = x != x
    if mode == 0:
        tile = x + 1.0
        keep = x > 0
    elif mode == 1:
        tile = x * 3.0
        keep = x < 0
    else:
        return
    tl.store(out_ptr + offs, tile, mask=keep)
    tl.store(mask_out_ptr + offs, keep.to(tl.int8))


@pytest.mark.parametrize("mode", [0, 1, 2])
def test_tensor_and_mask_block_arguments(target, mode):
    x = torch.randn(16)
    out = torch.zeros(16)
    mask_out = torch.full((16,), 9, dtype=torch.int8)
    tensors_through_branches_kernel[(1,)](x, out, mask_out, scalar(mode), BLOCK=16)
    if mode == 2:
        assert torch.all(out == 0) and torch.all(mask_out == 9)
        return
    keep = x > 0 if mode == 0 else x < 0
    tile = x + 1.0 if mode == 0 else x * 3.0
    torch.testing.assert_close(out, torch.where(keep, tile, torch.zeros(16)))
    assert torch.equal(mask_out, keep.to(torch.int8))


@triton.jit
def constexpr_return_kernel(sem_ptr, out_ptr, TOTAL: tl.constexpr):
    # A constexpr-decided return followed by an atomic and a dynamic return (triton's reproducer of a
    # return in an if combined with a non-trivial CFG).
    if TOTAL == 1:
        tl.store(out_ptr, tl.program_id(0))
        return
    prev = tl.atomic_add(sem_ptr, 1)
    if prev + 1 != TOTAL:
        return
    tl.store(out_ptr, tl.program_id(0) + prev)


def test_return_after_atomic(target):
    sem = torch.zeros((), dtype=torch.int32)
    out = torch.full((), -1, dtype=torch.int32)
    constexpr_return_kernel[(1,)](sem, out, 1)
    assert out.item() == 0
    out.fill_(-1)
    constexpr_return_kernel[(4,)](sem, out, 4)
    assert sem.item() == 4 and out.item() >= 3      # the last program to arrive stores
