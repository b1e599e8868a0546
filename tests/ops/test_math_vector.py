"""f32 math becomes vector code (no C library call in the loop) within 2 ulp of the exact result (torch in
float64, rounded), on random and edge inputs: zeros, subnormals, huge values, infinities, NaN."""
import re

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from spine.language.cpu import libdevice

LIBM_CALLS = ("expf", "logf", "log2f", "erff", "tanhf", "sinf", "cosf", "powf", "exp@", "log@", "sin@", "cos@")


@triton.jit
def math_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr, OP: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    if OP == "exp":
        r = tl.exp(x)
    elif OP == "log":
        r = tl.log(x)
    elif OP == "log2":
        r = tl.log2(x)
    elif OP == "erf":
        r = tl.erf(x)
    elif OP == "tanh":
        r = libdevice.tanh(x)
    elif OP == "sigmoid":
        r = tl.sigmoid(x)
    elif OP == "sin":
        r = tl.sin(x)
    elif OP == "cos":
        r = tl.cos(x)
    else:
        r = libdevice.pow(x, tl.load(y_ptr + offs, mask=mask))
    tl.store(out_ptr + offs, r, mask=mask)


EDGES = [0.0, -0.0, 1e-45, -1e-45, 1e-40, -1e-40, 1.17e-38, 1e-10, -1e-10, 0.5, 1.0, -1.0, 2.0, -2.0, 3.0, 3.9,
         4.0, 10.0, 88.0, 88.8, 89.0, -87.0, -103.0, -104.0, -110.0, 100.0, 1e4, -1e4, 1.5707964, 3.1415927,
         8388608.0, 16777215.0, 1e20, -1e20, 3.4e38, -3.4e38, float("inf"), float("-inf"), float("nan")]
REFERENCE = {"exp": torch.exp, "log": torch.log, "log2": torch.log2, "erf": torch.erf, "tanh": torch.tanh,
             "sigmoid": torch.sigmoid, "sin": torch.sin, "cos": torch.cos}


def ulp_error(got: torch.Tensor, exact: torch.Tensor) -> torch.Tensor:
    """|got - exact| in units of the last place of exact rounded to f32; NaN against NaN is 0, NaN against a
    number infinite."""
    want = exact.float()
    got64, want64 = got.double(), want.double()
    spacing = torch.from_numpy(np.spacing(np.abs(want.numpy())).astype(np.float64))
    err = (got64 - exact).abs() / spacing
    err[(got64 == want64) | (got.isnan() & want.isnan())] = 0.0
    err[got.isnan() != want.isnan()] = float("inf")
    return err


def inputs(target: str) -> torch.Tensor:
    n = 1 << (11 if target == "riscv64" else 16)
    return torch.cat([torch.randn(n) * 10, torch.rand(n) * 2 - 1, torch.exp(torch.randn(n) * 20),
                      torch.tensor(EDGES)])


def run(op, x, y=None):
    out = torch.empty_like(x)
    compiled = math_kernel[(triton.cdiv(x.numel(), 1024),)](x, x if y is None else y, out, x.numel(),
                                                            BLOCK=1024, OP=op)
    return out, compiled


def assert_vector_code(compiled):
    llir = compiled.asm["llir"]
    calls = [name for name in LIBM_CALLS if f"@{name.rstrip('@')}(" in llir]
    assert not calls, calls


@pytest.mark.parametrize("op", sorted(REFERENCE))
def test_unary_math_within_two_ulp(target, op):
    """Within 2 ulp of the exact result; sigmoid, which Triton composes from exp, a sum and a division
    (each rounded), within 2 ulp of torch's float32 sigmoid."""
    x = inputs(target)
    out, compiled = run(op, x)
    reference = REFERENCE[op](x).double() if op == "sigmoid" else REFERENCE[op](x.double())
    err = ulp_error(out, reference)
    worst = int(err.argmax())
    assert err.max() <= 2.0, (x[worst].item(), out[worst].item(), REFERENCE[op](x.double())[worst].item())
    assert_vector_code(compiled)


@pytest.mark.parametrize("cpu", ["x86-64-v2", "x86-64"])
@pytest.mark.parametrize("op", sorted(REFERENCE))
def test_math_without_fma_instructions_multiplies_and_adds(monkeypatch, fresh_cache, op, cpu):
    """Built for a CPU without FMA (x86-64-v2), the expansions' multiply-adds are a multiply and an add, not
    a call of the C library's fmaf per element, and the results stay within 2 ulp; the same without SSE4.1
    (x86-64), whose floors are the C library's."""
    from tests.cpu_features import host_runs
    from spine.driver import CPUDriver
    if not host_runs(cpu):
        pytest.skip(f"this machine cannot run {cpu} code")
    monkeypatch.setenv("SPINE_HOST_CPU", cpu)
    triton.runtime.driver.set_active(CPUDriver(target="host"))
    x = inputs("host")
    out, compiled = run(op, x)
    assert "llvm.intr.fma" not in compiled.asm["llir"] and "@llvm.fma" not in compiled.asm["llir"]
    reference = REFERENCE[op](x).double() if op == "sigmoid" else REFERENCE[op](x.double())
    err = ulp_error(out, reference)
    worst = int(err.argmax())
    assert err.max() <= 2.0, (x[worst].item(), out[worst].item(), REFERENCE[op](x.double())[worst].item())


@pytest.mark.parametrize("cpu,features,fused", [
    ("x86-64-v2", "", False), ("sandybridge", "", False), ("ivybridge", "", False), ("x86-64-v3", "-fma", False),
    ("x86-64-v3", "", True), ("haswell", "", True), ("znver4", "", True), ("x86-64-v2", "+fma", True),
    ("some-future-core", "", True)])
def test_which_x86_cpus_have_fused_multiply_add(cpu, features, fused):
    """A name Spine does not know is taken to have FMA: LLVM then decides, as before."""
    from spine.targets import has_fused_multiply_add
    assert has_fused_multiply_add("x86_64-unknown-linux-gnu", cpu, features) is fused
    assert has_fused_multiply_add("riscv64-unknown-linux-gnu", "generic-rv64", "")


def test_a_kernels_own_fma_stays_fused_without_fma_instructions():
    """tl.fma promises one rounding: without FMA instructions it stays llvm.fma (the C library's fmaf)."""
    from spine.compiler.lower import LoweringChoices, lower
    from spine.driver import CPUDriver

    @triton.jit
    def fma_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs)
        tl.store(out_ptr + offs, tl.fma(x, x, tl.exp(x)))

    triton.runtime.driver.set_active(CPUDriver(target="host"))
    x = torch.randn(64)
    compiled = fma_kernel[(1,)](x, torch.empty_like(x), BLOCK=64)
    md = compiled.metadata
    for cpu, expansion_fmas in (("x86-64-v2", False), ("x86-64-v3", True)):
        choices = LoweringChoices.for_target(md.triple, False, cpu, "")
        assert choices.fused_multiply_add == expansion_fmas
        fmas = len(re.findall(r"call [^@]*@llvm\.fma\.", lower(compiled.asm["linalg"], choices)))
        assert fmas == 1 if cpu == "x86-64-v2" else fmas > 1, (cpu, fmas)


def test_erf_across_its_branches(target):
    """erf is two fits joined at |x| = 1 and saturated at 3.95: a dense sweep of [-4.5, 4.5] and the
    neighbours of both joins stay within 1.5 ulp (the worst case of a float32 model of the expansion, on
    every 13th float of [0, 4.5] and every 3rd of [1, 4.5], is 1.24)."""
    n = 1 << (12 if target == "riscv64" else 18)
    sweep = torch.linspace(-4.5, 4.5, n)
    joins = torch.tensor([1.0, 3.95], dtype=torch.float64)
    neighbours = torch.cat([joins + k * 2.0 ** -23 for k in range(-64, 65)]).float()
    x = torch.cat([sweep, neighbours, -neighbours])
    out, compiled = run("erf", x)
    err = ulp_error(out, torch.erf(x.double()))
    worst = int(err.argmax())
    assert err.max() <= 1.5, (x[worst].item(), out[worst].item(), torch.erf(x[worst].double()).item())
    assert_vector_code(compiled)


def test_pow_within_two_ulp(target):
    n = 1 << (11 if target == "riscv64" else 15)
    edges = torch.tensor(EDGES)
    a = torch.cat([torch.rand(n) * 10, -torch.rand(256) * 4, edges.repeat_interleave(len(EDGES))])
    b = torch.cat([torch.randn(n) * 4, torch.randint(-5, 6, (256,)).float(), edges.repeat(len(EDGES))])
    out, compiled = run("pow", a, b)
    exact = torch.pow(a.double(), b.double())
    err = ulp_error(out, exact)
    worst = int(err.argmax())
    assert err.max() <= 2.0, (a[worst].item(), b[worst].item(), out[worst].item(), exact[worst].item())
    assert_vector_code(compiled)


def test_math_loops_are_vectorised_on_the_host(monkeypatch, tmp_path):
    """The host's loop of erf/sin/log is vector code, with no call in it: ymm or zmm registers where the
    CPU has AVX, packed SSE operations on xmm registers where it has not (SPINE_HOST_CPU=x86-64-v2).
    Without SSE4.1 (SPINE_HOST_CPU=x86-64) LLVM has no vector floor and calls the C library's for the
    reductions' roundings: left so, since glibc's floor runs SSE4.1's roundsd on any CPU that has it, and
    floor as additions and selects (tried) made that build's sin 5 % slower on a Zen 3."""
    from spine.driver import CPUDriver
    from spine.targets import cpu_features, target_from_name
    monkeypatch.setenv("SPINE_TRITON_DUMP_PATH", str(tmp_path))
    triton.runtime.driver.set_active(CPUDriver(target="host"))
    host = target_from_name("host")
    features = cpu_features(host.triple, host.cpu, host.features)
    has_avx = "+avx2" in features
    allowed = () if features & {"+sse4.2", "+sse4.1"} else ("floor@PLT",)
    vector_code = re.compile(r"%[yz]mm" if has_avx else r"\s(?:add|sub|mul|div|max|min|and)p[sd]\s+%xmm")
    x = torch.randn(4096)
    for op in ("erf", "sin", "log"):
        _, compiled = run(op, x.abs() + 0.5)
        asm = (tmp_path / "math_kernel.s").read_text()
        assert vector_code.search(asm), op
        calls = [line.split()[-1] for line in asm.splitlines() if "call" in line and "mem" not in line]
        assert [call for call in calls if call not in allowed] == [], op


@pytest.mark.parametrize("cpu,scaled", [("x86-64-v4", True), ("znver4", True), ("sapphirerapids", True),
                                        ("x86-64-v3", False), ("znver3", False)])
def test_exp_scales_with_vscalef_only_on_avx512(cpu, scaled):
    """exp's scaling by 2^k is one vscalefps (llvm.ldexp) on CPUs with AVX-512; elsewhere it stays two
    multiplications, since LLVM would make llvm.ldexp a C library call per element there."""
    from spine.compiler.codegen import optimize_and_emit
    from spine.compiler.entry import entry_module_ir
    from spine.compiler.lower import LoweringChoices, lower
    from spine.driver import CPUDriver
    from spine.kernel_facts import KernelFacts
    triton.runtime.driver.set_active(CPUDriver(target="host"))
    x = torch.randn(300)
    _, compiled = run("exp", x)
    md = compiled.metadata
    choices = LoweringChoices.for_target(md.triple, False, cpu, "")
    assert choices.ldexp_scaling == scaled
    llir = lower(compiled.asm["linalg"], choices)
    assert ("llvm.ldexp" in llir) == scaled
    facts = KernelFacts.from_metadata(md)
    entry = entry_module_ir(md.name, facts.arg_kinds, facts.argument_views, md.triple)
    _, asm = optimize_and_emit(llir, entry, md.triple, cpu, "", want_assembly=True)
    assert ("vscalefps" in asm) == scaled
    assert "ldexp" not in asm


def test_exp_gives_the_same_bits_with_either_scaling(monkeypatch, fresh_cache):
    """The two scalings round once, at the same point: exp's results are identical bit for bit."""
    from tests.cpu_features import host_runs
    from spine.driver import CPUDriver
    if not host_runs("x86-64-v4"):
        pytest.skip("this machine cannot run AVX-512 code")
    x = inputs("host")
    results = []
    for level in ("x86-64-v3", "x86-64-v4"):
        monkeypatch.setenv("SPINE_HOST_CPU", level)
        triton.runtime.driver.set_active(CPUDriver(target="host"))
        out, compiled = run("exp", x)
        assert ("llvm.ldexp" in compiled.asm["llir"]) == (level == "x86-64-v4")
        results.append(out)
    assert torch.equal(results[0].view(torch.int32), results[1].view(torch.int32))
