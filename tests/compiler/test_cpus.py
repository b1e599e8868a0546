"""Users' CPUs are not this machine's: the suite's kernels compile for the x86 and RISC-V cores users have
(LLVM's per-core cost models differ, and so do the assertions they trip), and run wherever this machine
can run them: natively for x86 levels it has, under QEMU for RISC-V without V and at other vector lengths."""
import dataclasses
import re

import pytest
import torch
import triton

from spine.compiler.export import export_generic
from spine.microkernels import choose
from spine.compiler.pipeline import build_from_linalg
from spine.driver import CPUDriver
from spine.kernel_facts import METADATA_KEY
from spine.options import CPUOptions
from spine.switches import RISCV_FEATURES
from spine.to_linalg import convert_ttir
from tests.cpu_features import host_runs
from tests.kernels import (add_kernel, cast_kernel, col_sum_kernel, elementwise_math_kernel, gather_kernel,
                           int_arith_kernel, row_reduce_kernel, row_sum_pointer_loop_kernel, scalar_kernel,
                           softmax_kernel, transpose_kernel)
from tests.ops.test_dot import matmul_kernel
from tests.ops.test_scan import cumsum_kernel
from tests.to_linalg.test_branches_ttir import parse_ttir

X86_CPUS = ("znver3", "znver4", "znver5", "sapphirerapids", "graniterapids", "skylake-avx512", "icelake-server",
            "alderlake", "x86-64-v2", "x86-64-v3", "x86-64-v4")
RISCV_NO_V = "+64bit,+m,+a,+f,+d,+c"
RISCV_CPUS = (("generic-rv64", RISCV_FEATURES.default), ("generic-rv64", RISCV_NO_V), ("spacemit-x60", ""),
              ("sifive-x280", ""))
QEMU_VLEN = "rv64,v=true,vlen={},elen=64,vext_spec=v1.0,zfh=true,zvfh=true,zba=true,zbb=true,zbs=true"


def _cases():
    """(name, kernel, grid, arguments, constexprs, indexes of the outputs): ragged sizes throughout."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(300, generator=g)
    m = torch.randn(37, 45, generator=g)
    a, b = torch.randn(33, 20, generator=g), torch.randn(20, 47, generator=g)
    h = torch.randn(300, generator=g).half()
    i = torch.randint(-1000, 1000, (300,), generator=g, dtype=torch.int32)
    idx = torch.randint(0, 300, (300,), generator=g)
    e = torch.empty
    return [
        ("add", add_kernel, (3,), [x, x, e(300), 300], dict(BLOCK=128), [2]),
        ("softmax", softmax_kernel, (37,), [e(37, 45), m, 45, 45, 45], dict(BLOCK=64), [0]),
        ("transpose", transpose_kernel, (3, 3), [m, e(45, 37), 37, 45, 45, 1, 37, 1], dict(BM=16, BN=16), [1]),
        ("row_reduce", row_reduce_kernel, (3,), [m, e(37), e(37), e(37), 37, 45, 45], dict(BM=16, BN=64),
         [1, 2, 3]),
        ("col_sum", col_sum_kernel, (3,), [m, e(45), 37, 45, 45], dict(BM=8, BN=16), [1]),
        ("pointer_loop", row_sum_pointer_loop_kernel, (37,), [m, e(37), 45, 45], dict(BLOCK=16), [1]),
        ("exp", elementwise_math_kernel, (3,), [x, e(300), 300, 0.5], dict(BLOCK=128, OP="exp"), [1]),
        ("erf", elementwise_math_kernel, (3,), [x, e(300), 300, 0.5], dict(BLOCK=128, OP="erf"), [1]),
        ("int_arith", int_arith_kernel, (3,), [i, i, e(300, dtype=torch.int32), 300, 3], dict(BLOCK=128), [2]),
        ("cast_f16", cast_kernel, (3,), [h, e(300, dtype=torch.half), 300], dict(BLOCK=128), [1]),
        ("gather", gather_kernel, (3,), [x, idx, e(300), 300], dict(BLOCK=128), [2]),
        ("scalar", scalar_kernel, (300,), [x, e(300), 1.5], {}, [1]),
        ("matmul", matmul_kernel, (3, 4), [a, b, e(33, 47), 33, 47, 20, 20, 1, 47, 1, 47, 1],
         dict(BM=16, BN=16, BK=16), [2]),
        ("cumsum", cumsum_kernel, (1,), [x, e(300), 300], dict(BLOCK=512, REVERSE=False), [1]),
    ]


def _run_all():
    outputs = {}
    for name, kernel, grid, args, constexprs, outs in _cases():
        kernel[grid](*args, **constexprs)
        outputs[name] = [args[k].clone() for k in outs]
    return outputs


def _compile_all():
    return [(name, kernel.warmup(*args, grid=grid, **constexprs))
            for name, kernel, grid, args, constexprs, _ in _cases()]


@pytest.fixture(scope="module")
def compiled_for():
    """target → [(case name, CompiledKernel)] for the default CPU of that target."""
    cache = {}

    def get(target):
        if target not in cache:
            triton.runtime.driver.set_active(CPUDriver(target=target))
            cache[target] = _compile_all()
        return cache[target]
    return get


def _codegen_for(compiled, cpu: str, features: str, tmp_path) -> None:
    """The CPU-dependent stages of every case, for one CPU: LLVM codegen and link, and before them the
    conversion when the CPU has another packed-matmul micro-kernel (RVV needs V) for tl.dot."""
    for name, kernel in compiled:
        md = kernel.metadata
        options = dataclasses.replace(CPUOptions(), triple=md.triple, cpu=cpu, features=features)
        metadata = {"name": md.name, METADATA_KEY: getattr(md, METADATA_KEY)}
        so = build_from_linalg(_linalg_for(kernel, options, tmp_path / name), metadata, options)
        assert so[:4] == b"\x7fELF", name


def _linalg_for(kernel, options, tmp_path) -> str:
    wanted = f'spine.microkernel = "{choose(options.triple, options.cpu, options.features).name}"'
    ttir = kernel.asm["ttir"]
    named = re.search(r'spine\.microkernel = "\w+"', ttir)
    if named is None or named.group(0) == wanted:
        return kernel.asm["linalg"]
    tmp_path.mkdir(parents=True)
    module = parse_ttir(ttir.replace(named.group(0), wanted), tmp_path)
    return convert_ttir(export_generic(module)).text


@pytest.mark.parametrize("cpu", X86_CPUS)
def test_suite_kernels_compile_for_x86_cpu(cpu, compiled_for, tmp_path):
    import platform
    if platform.machine() != "x86_64":
        pytest.skip("host kernels are compiled for this machine's architecture")
    _codegen_for(compiled_for("host"), cpu, "", tmp_path)


@pytest.mark.parametrize("cpu,features", RISCV_CPUS, ids=["rv64gcv", "rv64gc", "spacemit-x60", "sifive-x280"])
def test_suite_kernels_compile_for_riscv_cpu(cpu, features, compiled_for, tmp_path):
    _codegen_for(compiled_for("riscv64"), cpu, features, tmp_path)


@pytest.fixture(scope="module")
def reference_outputs():
    triton.runtime.driver.set_active(CPUDriver(target="host"))
    return _run_all()


def _assert_same(outputs, reference):
    for name, values in outputs.items():
        for got, want in zip(values, reference[name]):
            torch.testing.assert_close(got, want, rtol=2e-5, atol=2e-5, msg=lambda m: f"{name}: {m}")


@pytest.mark.parametrize("level", ("x86-64-v2", "x86-64-v3", "x86-64-v4"))
def test_suite_kernels_run_for_x86_level(level, monkeypatch, fresh_cache, reference_outputs):
    if not host_runs(level):
        pytest.skip(f"this machine cannot run {level} code")
    monkeypatch.setenv("SPINE_HOST_CPU", level)
    triton.runtime.driver.set_active(CPUDriver(target="host"))
    _assert_same(_run_all(), reference_outputs)


def _restart_qemu():
    from spine.driver.cpu_driver import _executor_for
    from spine.targets import riscv64_target
    _executor_for(riscv64_target()).shutdown()


@pytest.mark.parametrize("vlen", (128, 512))
def test_suite_kernels_run_at_other_vector_lengths(vlen, monkeypatch, reference_outputs):
    monkeypatch.setenv("SPINE_QEMU_CPU", QEMU_VLEN.format(vlen))
    _restart_qemu()
    try:
        triton.runtime.driver.set_active(CPUDriver(target="riscv64"))
        _assert_same(_run_all(), reference_outputs)
    finally:
        _restart_qemu()


def test_suite_kernels_run_without_the_vector_extension(monkeypatch, fresh_cache, reference_outputs):
    monkeypatch.setenv("SPINE_RISCV_FEATURES", RISCV_NO_V)
    triton.runtime.driver.set_active(CPUDriver(target="riscv64"))
    _assert_same(_run_all(), reference_outputs)
