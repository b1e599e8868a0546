"""Spine plugs into the unmodified triton wheel, under Spine's and spine-triton's names."""
import importlib
import platform

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

from tests.kernels import add_kernel


def test_backend_is_discovered_through_the_entry_point():
    from triton.backends import backends
    # Registered as "cpu", the backend name torch.compile's Inductor looks for.
    assert backends["cpu"].driver.__name__ == "CPUDriver"


def test_spine_triton_spellings_resolve():
    from triton.backends.spine_triton.driver import CPUDriver as Aliased
    from spine.driver import CPUDriver
    assert Aliased is CPUDriver
    smt = importlib.import_module("triton.language.extra.smt")
    assert smt is importlib.import_module("spine.language.smt")
    from triton.language.extra.cpu import libdevice
    assert hasattr(libdevice, "erf")


def test_set_active_and_run():
    from triton.backends.spine_triton.driver import CPUDriver
    triton.runtime.driver.set_active(CPUDriver(target="host"))
    x = torch.rand(10)
    out = torch.empty(10)
    add_kernel[(1,)](x, x, out, 10, BLOCK=16)
    torch.testing.assert_close(out, 2 * x)


def test_each_target_runs_where_it_should(target):
    x = torch.rand(10)
    out = torch.empty(10)
    compiled = add_kernel[(1,)](x, x, out, 10, BLOCK=16)
    compiled._init_handles()
    kernel = type(compiled.function).__name__
    assert compiled.metadata.arch == target
    if target == "riscv64" and platform.machine() != "riscv64":
        assert kernel == "QemuKernel"
        assert compiled.asm["so"][18] == 243  # ELF e_machine EM_RISCV
    else:
        assert kernel == "NativeKernel"


def test_do_bench_works_on_cpu():
    from spine.driver import CPUDriver
    triton.runtime.driver.set_active(CPUDriver(target="host"))
    x = torch.rand(1000)
    out = torch.empty(1000)
    ms = triton.testing.do_bench(lambda: add_kernel[(1,)](x, x, out, 1000, BLOCK=1024), warmup=5, rep=20)
    assert ms > 0


@triton.jit
def generic_libdevice_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, libdevice.erf(tl.load(x_ptr + offs, mask=mask)), mask=mask)


def test_generic_libdevice_module_maps_to_cpu_math(target):
    # Kernels written against triton.language.extra.libdevice get Spine's CPU implementations.
    x = torch.randn(50)
    out = torch.empty(50)
    generic_libdevice_kernel[(1,)](x, out, 50, BLOCK=64)
    torch.testing.assert_close(out, torch.erf(x))
