"""O3 without loop unrolling on x86 (codegen.unrolls_loops): a block-scaled reduction over [rows, blocks,
lanes] tiles, the shape of a quantized GEMV, keeps its vector loads contiguous instead of becoming gathers
(unrolled first, the lanes' loop is gone and the vectoriser takes the rows': 18 gathers for 16 rows of one
block a step on znver4), and computes the same on both targets."""
import platform
import re

import pytest
import torch
import triton
import triton.language as tl

from spine.compiler.codegen import unrolls_loops


@triton.jit
def block_scaled_rows_kernel(w_ptr, s_ptr, x_ptr, out_ptr, n_blocks, ROWS: tl.constexpr, NB: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    blocks = tl.arange(0, NB)
    lanes = tl.arange(0, 16)
    acc = tl.zeros([ROWS], dtype=tl.float32)
    for k in range(0, n_blocks, NB):
        b = k + blocks
        ok = b < n_blocks
        w = tl.load(w_ptr + (rows[:, None, None] * n_blocks + b[None, :, None]) * 16 + lanes[None, None, :],
                    mask=ok[None, :, None], other=0.0)
        x = tl.load(x_ptr + b[:, None] * 16 + lanes[None, :], mask=ok[:, None], other=0.0)
        s = tl.load(s_ptr + rows[:, None] * n_blocks + b[None, :], mask=ok[None, :], other=0.0)
        acc += tl.sum(tl.sum(w * x[None, :, :], 2) * s, 1)
    tl.store(out_ptr + rows, acc)


def _inputs(n_rows=16, n_blocks=11):
    torch.manual_seed(0)
    return (torch.randn(n_rows, n_blocks, 16), torch.rand(n_rows, n_blocks), torch.randn(n_blocks, 16),
            torch.empty(n_rows))


def test_unrolling_is_left_to_riscv():
    assert unrolls_loops("riscv64-unknown-linux-gnu") and not unrolls_loops("x86_64-unknown-linux-gnu")


def test_block_scaled_rows(target):
    w, s, x, out = _inputs()
    block_scaled_rows_kernel[(2,)](w, s, x, out, 11, ROWS=8, NB=4)
    want = ((w * x[None]).sum(2) * s).sum(1)
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(platform.machine() != "x86_64", reason="host kernels are compiled for this machine's ISA")
@pytest.mark.parametrize("cpu", ["znver4", "x86-64-v3", "sapphirerapids"])
@pytest.mark.parametrize("rows,nb", [(16, 1), (8, 4)])
def test_x86_code_reads_the_tiles_without_gathers(cpu, rows, nb, monkeypatch, fresh_cache):
    monkeypatch.setenv("SPINE_TARGET", "host")
    monkeypatch.setenv("SPINE_HOST_CPU", cpu)
    from spine.driver import CPUDriver
    triton.runtime.driver.set_active(CPUDriver(target="host"))
    w, s, x, out = _inputs()
    compiled = block_scaled_rows_kernel.warmup(w, s, x, out, 11, ROWS=rows, NB=nb, grid=(16 // rows,))
    llir = compiled.asm["llir"]
    gathers = re.findall(r"call .*@llvm\.masked\.(?:gather|scatter)", llir)
    assert not gathers, f"{len(gathers)} gathers and scatters"
