"""Device functions triton leaves as calls (`@triton.jit(noinline=True)`): inlined by the conversion
(to_linalg/calls.py), pointer arguments keeping their structure."""
import torch
import triton
import triton.language as tl


@triton.jit(noinline=True)
def add_one(x):
    return x + 1


@triton.jit(noinline=True)
def add_two(y):
    return y + 2


@triton.jit(noinline=True)
def call_graph(x, y, z_ptr):
    # A noinline function calling noinline functions, inside ifs.
    if x >= 1:
        x = add_one(x)
    else:
        x = add_two(x)
    tl.store(z_ptr, x + add_two(y))


@triton.jit(noinline=True)
def two_results(x, y):
    return x + 1, y * 2


@triton.jit
def scalar_calls_kernel(x_ptr, y_ptr, z_ptr, w_ptr):
    x = tl.load(x_ptr)
    y = tl.load(y_ptr)
    call_graph(x, y, z_ptr)
    a, b = two_results(x, y)
    tl.store(w_ptr, a + b)


def test_noinline_call_graph_and_multiple_results(target):
    for x0 in (0.5, 3.0):
        x, y = torch.tensor([x0]), torch.tensor([2.0])
        z, w = torch.zeros(1), torch.zeros(1)
        scalar_calls_kernel[(1,)](x, y, z, w)
        expected_x = x0 + 1 if x0 >= 1 else x0 + 2
        assert z.item() == expected_x + 4.0
        assert w.item() == x0 + 1 + 4.0


@triton.jit(noinline=True)
def load_block(ptr, BLOCK: tl.constexpr):
    return tl.load(ptr + tl.arange(0, BLOCK))


@triton.jit(noinline=True)
def square_tile_in_place(z_ptr, stride, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)[:, None] * stride + tl.arange(0, BLOCK)[None, :]
    z = tl.load(z_ptr + offs)
    tl.store(z_ptr + offs, tl.dot(z, z))


@triton.jit
def tensor_calls_kernel(x_ptr, y_ptr, out_ptr, z_ptr, BLOCK: tl.constexpr):
    # Pointer arguments and tensor results; the same function called twice; a dot inside a callee.
    pid = tl.program_id(0)
    x = load_block(x_ptr + pid * BLOCK, BLOCK)
    y = load_block(y_ptr + pid * BLOCK, BLOCK)
    tl.store(out_ptr + pid * BLOCK + tl.arange(0, BLOCK), x + y)
    if pid == 0:
        square_tile_in_place(z_ptr, BLOCK, BLOCK)


def test_noinline_with_pointers_and_tensors(target):
    block = 16
    x, y = torch.randn(2 * block), torch.randn(2 * block)
    out = torch.empty(2 * block)
    z = torch.randn(block, block)
    expected_z = z @ z
    tensor_calls_kernel[(2,)](x, y, out, z, BLOCK=block)
    torch.testing.assert_close(out, x + y)
    torch.testing.assert_close(z, expected_z, rtol=1e-4, atol=1e-4)


@triton.jit
def positive_or_store(x, flag_ptr):
    # Several blocks (an early return) called inside a loop: triton's inliner cannot inline it there.
    if x > 0:
        return x * 2
    tl.store(flag_ptr, x)
    return x - 1


@triton.jit
def call_in_loop_kernel(x_ptr, out_ptr, flag_ptr, n):
    for i in range(n):
        tl.store(out_ptr + i, positive_or_store(tl.load(x_ptr + i), flag_ptr + i))


def test_function_with_early_return_called_in_a_loop(target):
    x = torch.tensor([1.0, -2.0, 3.0, -4.0])
    out, flags = torch.zeros(4), torch.zeros(4)
    call_in_loop_kernel[(1,)](x, out, flags, 4)
    torch.testing.assert_close(out, torch.where(x > 0, x * 2, x - 1))
    torch.testing.assert_close(flags, torch.where(x > 0, torch.zeros(4), x))
