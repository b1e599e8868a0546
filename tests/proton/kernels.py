"""Kernels marked with proton scopes (triton.profiler.language), shared by the profiler's tests."""
import triton
import triton.language as tl
import triton.profiler.language as pl


@triton.jit
def scoped_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """outer ⊃ (load, compute, store); a 2-D grid, so program ids have two coordinates."""
    pid = tl.program_id(0) + tl.program_id(1) * tl.num_programs(0)
    pl.enter_scope("outer")
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    pl.enter_scope("load")
    x = tl.load(x_ptr + offs, mask=mask)
    pl.exit_scope("load")
    pl.enter_scope("compute")
    y = x * 2.0 + 1.0
    pl.exit_scope("compute")
    pl.enter_scope("store")
    tl.store(out_ptr + offs, y, mask=mask)
    pl.exit_scope("store")
    pl.exit_scope("outer")


@triton.jit
def looped_kernel(x_ptr, out_ptr, STEPS: tl.constexpr, BLOCK: tl.constexpr):
    """A scope entered once per loop iteration."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for step in range(STEPS):
        pl.enter_scope("step")
        acc += tl.load(x_ptr + offs) * step
        pl.exit_scope("step")
    tl.store(out_ptr + offs, acc)


@triton.jit
def plain_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1.0, mask=mask)
