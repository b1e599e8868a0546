"""tl.where between pointers into one argument (to_linalg/pointer_select.py): a scalar choice keeps the
access strided, an elementwise one gathers."""
import torch
import triton
import triton.language as tl


@triton.jit
def scalar_choice_kernel(x_ptr, out_ptr, flag, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    base = tl.where(flag > 0, x_ptr + BLOCK, x_ptr)
    tl.store(out_ptr + offs, tl.load(base + offs))


def test_scalar_condition_selects_the_offset(target):
    x = torch.randn(32)
    out = torch.empty(16)
    scalar_choice_kernel[(1,)](x, out, 1, BLOCK=16)
    torch.testing.assert_close(out, x[16:])
    scalar_choice_kernel[(1,)](x, out, 0, BLOCK=16)
    torch.testing.assert_close(out, x[:16])


@triton.jit
def elementwise_choice_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    ptrs = tl.where(offs % 2 == 0, x_ptr + offs, x_ptr + 2 * offs + 1)
    tl.store(out_ptr + offs, tl.load(ptrs))


def test_tensor_condition_gathers(target):
    x = torch.randn(64)
    out = torch.empty(16)
    elementwise_choice_kernel[(1,)](x, out, BLOCK=16)
    i = torch.arange(16)
    torch.testing.assert_close(out, x[torch.where(i % 2 == 0, i, 2 * i + 1)])


@triton.jit
def reset_in_loop_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    # A pointer carried by the loop, reset to the argument every third step (what triton makes of a tensor
    # descriptor created again inside a loop).
    offs = tl.arange(0, BLOCK)
    p = x_ptr
    acc = tl.zeros((BLOCK,), tl.float32)
    for i in range(n):
        p = tl.where(i % 3 == 0, x_ptr, p + BLOCK)
        acc += tl.load(p + offs)
    tl.store(out_ptr + offs, acc)


def test_select_against_a_loop_carried_pointer(target):
    x = torch.randn(64)
    out = torch.empty(16)
    reset_in_loop_kernel[(1,)](x, out, 7, BLOCK=16)
    rows = x.view(4, 16)
    expected = sum(rows[i % 3] for i in range(7))
    torch.testing.assert_close(out, expected)
