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


@triton.jit
def integer_address_kernel(cond_ptr, a_ptr, b_ptr, out_ptr, BLOCK: tl.constexpr):
    # Triton's test_where on "*int32": integers made pointers, selected, stored back as integers
    offs = tl.arange(0, BLOCK)
    a = tl.load(a_ptr + offs).to(tl.pi32_t)
    b = tl.load(b_ptr + offs).to(tl.pi32_t)
    tl.store(out_ptr + offs, tl.where(tl.load(cond_ptr + offs), a, b))


def test_select_between_integer_addresses(target):
    cond = torch.rand(16) > 0.5
    a = torch.randint(0, 2**40, (16,))
    b = torch.randint(0, 2**40, (16,))
    out = torch.empty(16, dtype=torch.int64)
    integer_address_kernel[(1,)](cond, a, b, out, BLOCK=16)
    assert torch.equal(out, torch.where(cond, a, b))


@triton.jit
def argument_choice_kernel(cond_ptr, a_ptr, b_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    ptr = tl.where(tl.load(cond_ptr), a_ptr, b_ptr)
    tl.store(out_ptr + offs, tl.load(ptr + offs))
    tl.store(ptr + offs, tl.load(ptr + offs) * 2)


def test_scalar_condition_selects_the_argument(target):
    for chosen in (True, False):
        a, b = torch.randn(16), torch.randn(16)
        a0, b0 = a.clone(), b.clone()
        out = torch.empty(16)
        argument_choice_kernel[(1,)](torch.tensor([chosen]), a, b, out, BLOCK=16)
        torch.testing.assert_close(out, a0 if chosen else b0)
        torch.testing.assert_close(a, 2 * a0 if chosen else a0)   # the store went where the load came from
        torch.testing.assert_close(b, b0 if chosen else 2 * b0)


@triton.jit
def pick_input_kernel(a_ptr, b_ptr, c_ptr, out_ptr, n_a, n_b, n_c, BLOCK: tl.constexpr):
    """FlagGems' cat: each row of programs picks its input (and its length) in an if/elif/else."""
    which = tl.program_id(1)
    if which == 0:
        in_ptr = a_ptr
        n = n_a
    elif which == 1:
        in_ptr = b_ptr + 1            # the pointers keep their own offsets
        n = n_b
    else:
        in_ptr = c_ptr
        n = n_c
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + which * 64 + offs, tl.load(in_ptr + offs, mask=offs < n) * 2, mask=offs < n)


def test_an_if_picks_among_arguments(target):
    a, b, c = torch.randn(50), torch.randn(31), torch.randn(64)
    out = torch.zeros(3, 64)
    pick_input_kernel[(4, 3)](a, b, c, out, 50, 30, 64, BLOCK=16)
    torch.testing.assert_close(out[0, :50], a * 2)
    torch.testing.assert_close(out[1, :30], b[1:] * 2)
    torch.testing.assert_close(out[2], c * 2)
    assert out[0, 50:].abs().sum() == 0 and out[1, 30:].abs().sum() == 0


@triton.jit
def write_picked_kernel(a_ptr, b_ptr, flag, BLOCK: tl.constexpr):
    """A store through the picked pointer: both arguments count as written."""
    if flag > 0:
        p = a_ptr
    else:
        p = b_ptr
    offs = tl.arange(0, BLOCK)
    tl.store(p + offs, tl.load(p + offs) + 1)


def test_a_store_through_the_picked_argument(target):
    a, b = torch.zeros(16), torch.zeros(16)
    write_picked_kernel[(1,)](a, b, 1, BLOCK=16)
    write_picked_kernel[(1,)](a, b, 0, BLOCK=16)
    write_picked_kernel[(1,)](a, b, 0, BLOCK=16)
    assert a.tolist() == [1.0] * 16 and b.tolist() == [2.0] * 16
