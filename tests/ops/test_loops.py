import torch
import triton
import triton.language as tl

from tests.kernels import row_sum_pointer_loop_kernel


def test_pointer_advanced_in_loop(target):
    x = torch.randn(7, 77)
    out = torch.empty(7)
    row_sum_pointer_loop_kernel[(7,)](x, out, 77, x.stride(0), BLOCK=16)
    torch.testing.assert_close(out, x.sum(1), rtol=1e-5, atol=1e-5)


@triton.jit
def running_scale_kernel(x_ptr, out_ptr, n, steps, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    scale = 1.0
    for i in range(steps):
        acc = acc * 0.5 + x * scale
        scale = scale + 1.0
    tl.store(out_ptr + offs, acc, mask=mask)


def test_loop_carried_tensor_and_scalar(target):
    x = torch.randn(100)
    out = torch.empty(100)
    running_scale_kernel[(2,)](x, out, 100, 5, BLOCK=64)
    acc = torch.zeros(100)
    for i in range(5):
        acc = acc * 0.5 + x * (1.0 + i)
    torch.testing.assert_close(out, acc)


@triton.jit
def strides_change_in_loop_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    # The pointer's stride doubles every iteration: structure cannot be carried, a gather must be.
    offs = tl.arange(0, BLOCK)
    ptrs = x_ptr + offs
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for i in range(3):
        acc += tl.load(ptrs)
        ptrs = ptrs + offs
    tl.store(out_ptr + offs, acc)


def test_loop_carried_pointer_with_changing_strides(target):
    x = torch.randn(64)
    out = torch.empty(16)
    strides_change_in_loop_kernel[(1,)](x, out, BLOCK=16)
    i = torch.arange(16)
    torch.testing.assert_close(out, x[i] + x[2 * i] + x[3 * i])


@triton.jit
def collatz_steps_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    # Nested while loops over scalars, with loads and stores through scalar pointers.
    idx = tl.program_id(0) * BLOCK
    while idx < tl.minimum(n, (tl.program_id(0) + 1) * BLOCK):
        v = tl.load(x_ptr + idx)
        steps = 0
        while v != 1:
            v = tl.where(v % 2 == 0, v // 2, 3 * v + 1)
            steps += 1
        tl.store(out_ptr + idx, steps)
        idx += 1


def test_while_loops(target):
    x = torch.randint(1, 60, (20,), dtype=torch.int32)
    out = torch.empty(20, dtype=torch.int32)
    collatz_steps_kernel[(3,)](x, out, 20, BLOCK=8)

    def steps(v):
        count = 0
        while v != 1:
            v = v // 2 if v % 2 == 0 else 3 * v + 1
            count += 1
        return count
    assert out.tolist() == [steps(int(v)) for v in x]


@triton.jit
def while_pointer_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    # A pointer tensor advanced in a while loop keeps its structure.
    ptrs = x_ptr + tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    start = 0
    while start < n:
        acc += tl.load(ptrs, mask=start + tl.arange(0, BLOCK) < n, other=0.0)
        ptrs += BLOCK
        start += BLOCK
    tl.store(out_ptr, tl.sum(acc, axis=0))


def test_pointer_carried_by_a_while_loop(target):
    x = torch.randn(70)
    out = torch.empty(1)
    while_pointer_kernel[(1,)](x, out, 70, BLOCK=16)
    torch.testing.assert_close(out[0], x.sum(), rtol=1e-5, atol=1e-5)


@triton.jit
def bool_carried_kernel(x_ptr, out_ptr, n, steps, BLOCK: tl.constexpr):
    # A boolean tensor carried through a loop (flipped where x exceeds the step): kept as bytes.
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0)
    flag = x > 0
    for i in range(steps):
        flag = flag ^ (x > i)
    tl.store(out_ptr + offs, flag, mask=mask)


def test_loop_carried_boolean_tensor(target):
    x = torch.randint(-3, 6, (100,), dtype=torch.int32)
    out = torch.empty(100, dtype=torch.bool)
    bool_carried_kernel[(2,)](x, out, 100, 4, BLOCK=64)
    expected = x > 0
    for i in range(4):
        expected = expected ^ (x > i)
    assert torch.equal(out, expected)


@triton.jit
def bool_from_if_kernel(x_ptr, out_ptr, n, flag, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0)
    if flag > 0:
        sign = x > 0
    else:
        sign = x < 0
    tl.store(out_ptr + offs, sign, mask=mask)


def test_if_yielding_boolean_tensor(target):
    x = torch.randint(-3, 4, (100,), dtype=torch.int32)
    out = torch.empty(100, dtype=torch.bool)
    for flag in (-1, 2):
        bool_from_if_kernel[(2,)](x, out, 100, flag, BLOCK=64)
        assert torch.equal(out, x > 0 if flag > 0 else x < 0)
