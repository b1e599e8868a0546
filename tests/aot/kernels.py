"""A second kernel for tests/aot's library of several kernels."""
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.jit
def c_words_kernel(int, default, rc, args, num_threads, grid_x, BLOCK: tl.constexpr):
    """Parameters named after C keywords and after the wrapper's own names."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < num_threads
    value = tl.load(int + offs, mask=mask) * args + tl.load(default + offs, mask=mask) + grid_x
    tl.store(rc + offs, value, mask=mask)


@triton.jit
def more_words_kernel(char, register, last_error, spine_arg0, true, new, INT32_MAX, BLOCK: tl.constexpr):
    """A header macro (true, INT32_MAX), a C++ keyword (new), the wrapper's static and a mangled name."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < INT32_MAX
    value = tl.load(char + offs, mask=mask) * spine_arg0 + tl.load(register + offs, mask=mask) + true * new
    tl.store(last_error + offs, value, mask=mask)
