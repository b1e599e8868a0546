"""smt matmul benchmarks: spine-triton's smt matmul kernel (tests/smt/test_smt_mm.py, unchanged) on the
host against torch.mm on the same threads, and its riscv64 code counted under QEMU.

    .venv/bin/python bench/smt_matmul.py [--quick] [--host | --riscv64 | --team]

Host: fp32 and fp16 inputs at 512^3 and 1024^3, on one thread (process CPU time) and on every core (wall
time); Spine's smt kernel, torch.mm and (for context) Spine's tl.dot matmul (tests/ops/test_dot.py) run in
turn, one call each per round (five on several threads: see rounds), many rounds in one process; the table gives the best and the median time of
each and torch's time divided by Spine's (above 1: Spine is faster), and GFLOP/s against the host's fp32
FMA roof (bench/matmul_fma_roof.c, measured at the start: one core's, times the threads). The blocks
column is BLOCK_M / BLOCK_N / SUB_BLK_M as blocks_for chooses them (every row of a block of 256 columns in
one program, in sub-blocks of 256 rows sharing one packing of B). On a shared machine the best times are
the meaningful ones, and the one-thread CPU times the steadiest.

--team: the SPLIT_MN arrangement as a single program, whose smt.parallel loop runs on one thread and then
on a team of two (host, wall time).

riscv64: one launch under QEMU at VLEN 128, 256 and 512 (the same vector-length-agnostic binary), every
executed guest instruction counted (bench/icount.py) and classified by disassembling the kernel
(llvm-objdump with RISC-V support, LLVM 14 or newer, on the PATH): instructions per vector FMA over the
whole kernel (packing and write-back included), and the share of vector FMAs in the micro-kernel's inner
loop (the loop whose body has the most vector FMAs).
"""
from __future__ import annotations

import argparse
import io
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import triton

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from spine.driver import CPUDriver  # noqa: E402
from tests.ops.test_dot import matmul_kernel  # noqa: E402
from tests.smt.test_smt_mm import mm_kernel  # noqa: E402

MICRO = {torch.float32: (8, 8, 16), torch.float16: (16, 8, 32)}     # spine-triton's legal micro tiles
VLENS = (128, 256, 512)
QEMU_CPU = "rv64,v=true,vlen={},elen=64,vext_spec=v1.0,zfh=true,zvfh=true,zba=true,zbb=true,zbs=true"
VECTOR_FMA = re.compile(r"^v(f)?(w)?(n)?(macc|madd|msac|msub)\.")


def smt_matmul(a, b, c, block_m: int, block_n: int, sub_m: int):
    """The kernel's SPLIT_M arrangement: each program multiplies its block of rows, in sub-blocks of `sub_m`
    rows (its smt.parallel loop), by its block of columns, all of K at once."""
    (m, k), n = a.shape, b.shape[1]
    mm, mk, mn = MICRO[a.dtype]
    block_k = triton.next_power_of_2(k)
    return mm_kernel[(triton.cdiv(m, block_m), triton.cdiv(n, block_n))](
        a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        BLOCK_SIZE_M=block_m, BLOCK_SIZE_N=block_n, BLOCK_SIZE_K=block_k, SPLIT_M=1, SPLIT_MN=0, SPLIT_K=0,
        SUB_BLK_M=sub_m, SUB_BLK_N=32, SUB_BLK_K=block_k, MICRO_M=mm, MICRO_K=mk, MICRO_N=mn)


def blocks_for(n: int) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_N, SUB_BLK_M): SPLIT_M as the kernel means it, every row (up to 1024) of a block of
    256 columns in one program, in sub-blocks of 256 rows that share the program's one packing of its block
    of B (smt_dot.py packs B once before the smt.parallel loop). Square blocks of 256 at 512^3 and 512 at
    1024^3, one sub-block each, packed B once per sub-block: against them, fp32 0.88 -> 0.93 of torch.mm's
    speed at 512^3 and 0.85 -> 0.91 at 1024^3, fp16 0.94 -> 0.99 at 512^3 (one thread, one process,
    2026-11-30). Sub-blocks run on all threads: (n / 256)^2 of them at these sizes."""
    return min(n, 1024), 256, 256


def fma_roof() -> float:
    """The host's fp32 FMA roof on one thread in GFLOP/s (bench/matmul_fma_roof.c), or 0 where no C
    compiler or no AVX2 is at hand."""
    source = os.path.join(os.path.dirname(os.path.abspath(__file__)), "matmul_fma_roof.c")
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        return 0.0
    with tempfile.TemporaryDirectory() as tmp:
        binary = os.path.join(tmp, "roof")
        if subprocess.run([compiler, "-O2", "-march=native", "-o", binary, source], capture_output=True).returncode:
            return 0.0
        return float(subprocess.run([binary], capture_output=True, text=True, check=True).stdout)


def tl_dot_matmul(a, b, c):
    (m, k), n = a.shape, b.shape[1]
    return matmul_kernel[(triton.cdiv(m, 64), triton.cdiv(n, 64))](
        a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        BM=64, BN=64, BK=64)


# ------------------------------------------------------------------------------------------------ host

def rounds(functions: dict, count: int, clock, calls: int = 1) -> dict:
    """Seconds per call of each function by `clock`, `calls` calls each per round, `count` rounds. On
    several threads the other library's threads still spin for a while after its call (libgomp's after
    torch.mm, Spine's grid after a launch) and slow the first call that follows: several calls per sample
    share that cost out, the same for every function."""
    for fn in functions.values():
        fn()
    samples = {name: [] for name in functions}
    for _ in range(count):
        for name, fn in functions.items():
            start = clock()
            for _ in range(calls):
                fn()
            samples[name].append((clock() - start) / calls)
    return samples


def host(quick: bool, one_thread: bool = False) -> None:
    """One thread (process CPU time: what a loaded machine disturbs least) and all cores (wall time)."""
    triton.runtime.driver.set_active(CPUDriver(target="host"))
    roof = fma_roof()
    print(f"host: {os.cpu_count()} cores; fp32 FMA roof {roof:.0f} GFLOP/s per core (bench/matmul_fma_roof.c); "
          "Spine and torch on the same threads; best / median of the rounds\n")
    print("| threads | inputs | size | blocks | smt.dot (Spine) | torch.mm | torch / smt (best, median) | "
          "smt GFLOP/s (% of roof) | torch GFLOP/s | tl.dot (Spine) | torch / tl.dot (best) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    runs = ((1, time.process_time),) + (() if one_thread else ((os.cpu_count(), time.perf_counter),))
    for threads, clock in runs:
        os.environ["SPINE_NUM_THREADS"] = str(threads)
        torch.set_num_threads(threads)
        for dtype in (torch.float32, torch.float16):
            for n in ((256,) if quick else (512, 1024)):
                print(host_row(threads, dtype, n, clock, quick, roof * threads))


def host_row(threads: int, dtype, n: int, clock, quick: bool, roof: float) -> str:
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    c, d, e = torch.empty(n, n, dtype=dtype), torch.empty(n, n, dtype=dtype), torch.empty(n, n, dtype=dtype)
    blocks = blocks_for(n)
    # torch writes into a preallocated output as Spine's kernels do
    functions = {"smt": lambda: smt_matmul(a, b, c, *blocks), "torch": lambda: torch.mm(a, b, out=e)}
    if dtype == torch.float32:
        functions["tl.dot"] = lambda: tl_dot_matmul(a, b, d)
    samples = rounds(functions, 10 if quick else max(20, int(4e10 / n ** 3)), clock, calls=1 if threads == 1 else 5)
    check(c, a, b)
    best = {name: min(s) for name, s in samples.items()}
    median = {name: statistics.median(s) for name, s in samples.items()}
    gflops = {name: 2 * n ** 3 / t / 1e9 for name, t in best.items()}
    share = f" ({gflops['smt'] / roof:.0%})" if roof else ""
    dot = f"{best['tl.dot'] * 1e3:.2f} ms | {best['torch'] / best['tl.dot']:.2f}" if "tl.dot" in best else "— | —"
    return (f"| {threads} | {str(dtype).replace('torch.', '')} | {n}^3 | {'/'.join(map(str, blocks))} | {best['smt'] * 1e3:.2f} / "
            f"{median['smt'] * 1e3:.2f} ms | {best['torch'] * 1e3:.2f} / {median['torch'] * 1e3:.2f} ms | "
            f"{best['torch'] / best['smt']:.2f}, {median['torch'] / median['smt']:.2f} | "
            f"{gflops['smt']:.0f}{share} | {gflops['torch']:.0f} | {dot} |")


def check(c, a, b) -> None:
    expected = torch.mm(a.float(), b.float())
    tol = 1e-3 if a.dtype == torch.float32 else 1e-1
    torch.testing.assert_close(c.float(), expected, rtol=tol, atol=tol * a.shape[1] ** 0.5)


# --------------------------------------------------------------------------------------------- riscv64

def disassemble(so: bytes) -> tuple[int, dict]:
    """(virtual address of the executable segment, {address: mnemonic}) of a riscv64 kernel .so."""
    from elftools.elf.elffile import ELFFile
    objdump = shutil.which("llvm-objdump")
    if objdump is None:
        raise SystemExit("riscv64 counts need llvm-objdump (LLVM 14 or newer) on the PATH")
    segment = next(s for s in ELFFile(io.BytesIO(so)).iter_segments()
                   if s["p_type"] == "PT_LOAD" and s["p_flags"] & 1)
    with tempfile.NamedTemporaryFile(suffix=".so") as f:
        f.write(so)
        f.flush()
        text = subprocess.run([objdump, "-d", "--no-show-raw-insn", "--mattr=+v,+zfh,+zba,+zbb,+zbs", f.name],
                              capture_output=True, text=True, check=True).stdout
    lines = (re.match(r"\s*([0-9a-f]+):\s+(\S+)\s*(.*)", line) for line in text.splitlines())
    return segment["p_vaddr"], {int(m.group(1), 16): (m.group(2), m.group(3)) for m in lines if m}


def inner_loop(instructions: dict) -> tuple[int, int]:
    """[first, last] address of the loop whose body has the most vector FMAs (the fewest instructions on
    ties): a backward branch and its target."""
    best = None
    for address, (mnemonic, operands) in instructions.items():
        target = re.search(r"0x([0-9a-f]+)", operands) if mnemonic.startswith("b") else None
        if target is None or int(target.group(1), 16) >= address:
            continue
        body = [a for a in instructions if int(target.group(1), 16) <= a <= address]
        fmas = sum(1 for a in body if VECTOR_FMA.match(instructions[a][0]))
        key = (fmas, -len(body))
        if fmas and (best is None or key > best[0]):
            best = (key, (body[0], body[-1]))
    return best[1]


def riscv_counts(dtype, m: int, n: int, k: int, block: int) -> list:
    from icount import executed_addresses
    triton.runtime.driver.set_active(CPUDriver(target="riscv64"))
    a, b = torch.randn(m, k).to(dtype), torch.randn(k, n).to(dtype)
    c = torch.empty(m, n, dtype=dtype)
    smt_matmul(a, b, c, block, block, block)
    rows = []
    saved = os.environ.get("SPINE_QEMU_CPU")
    try:
        for vlen in VLENS:
            os.environ["SPINE_QEMU_CPU"] = QEMU_CPU.format(vlen)
            counts, (lo, hi), compiled = executed_addresses(lambda: smt_matmul(a, b, c, block, block, block))
            check(c, a, b)
            rows.append((vlen,) + classify(counts, lo, hi, compiled.asm["so"]))
    finally:
        if saved is None:
            os.environ.pop("SPINE_QEMU_CPU", None)
        else:
            os.environ["SPINE_QEMU_CPU"] = saved
    return rows


def classify(counts: dict, lo: int, hi: int, so: bytes) -> tuple:
    """(instructions, vector FMAs, instructions in the inner loop, vector FMAs in it) executed."""
    vaddr, instructions = disassemble(so)
    first, last = inner_loop(instructions)
    total = fmas = loop_total = loop_fmas = 0
    for pc, count in counts.items():
        if not lo <= pc < hi:
            continue
        address = pc - lo + vaddr
        is_fma = bool(VECTOR_FMA.match(instructions.get(address, ("", ""))[0]))
        total += count
        fmas += count if is_fma else 0
        if first <= address <= last:
            loop_total += count
            loop_fmas += count if is_fma else 0
    return total, fmas, loop_total, loop_fmas


def riscv64(quick: bool) -> None:
    m = n = 128
    k = 128 if quick else 256
    print(f"\nriscv64 (QEMU): {m}x{n}x{k}, one program of 128 x 128 (its whole K at once), one launch\n")
    print("| inputs | VLEN | guest instructions | vector FMAs | instructions per vector FMA | "
          "vector FMA share of the inner loop |")
    print("|---|---|---|---|---|---|")
    for dtype in (torch.float32, torch.float16):
        for vlen, total, fmas, loop_total, loop_fmas in riscv_counts(dtype, m, n, k, 128):
            print(f"| {str(dtype).replace('torch.', '')} | {vlen} | {total:,} | {fmas:,} | {total / fmas:.3f} | "
                  f"{loop_fmas / loop_total:.1%} |")


def team(quick: bool) -> None:
    """The SPLIT_MN arrangement as one program (its parallel loop over 16 x 32 sub-blocks, B staged behind
    the mbarriers): the loop on one thread, then on a team of two (SPINE_NUM_THREADS 1 and 2)."""
    from tests.smt.test_smt_mm import smt_mm
    triton.runtime.driver.set_active(CPUDriver(target="host"))
    m, n, k = (256, 64, 256) if quick else (1024, 64, 1024)
    print(f"\nSPLIT_MN, one program of {m} x {n} x {k}; best / median wall time of the rounds\n")
    print("| inputs | one thread | two threads | speed-up (best) |\n|---|---|---|---|")
    for dtype in (torch.float32, torch.float16):
        a, b = torch.randn(m, k).to(dtype), torch.randn(k, n).to(dtype)
        functions = {}
        for threads in (1, 2):
            def run(threads=threads):
                os.environ["SPINE_NUM_THREADS"] = str(threads)
                return smt_mm(a, b, "split_mn", block_m=m, block_n=n)
            functions[threads] = run
            check(run(), a, b)
        samples = rounds(functions, 10 if quick else 60, time.perf_counter)
        best = {t: min(s) for t, s in samples.items()}
        shown = {t: f"{best[t] * 1e3:.2f} / {statistics.median(s) * 1e3:.2f} ms" for t, s in samples.items()}
        print(f"| {str(dtype).replace('torch.', '')} | {shown[1]} | {shown[2]} | {best[1] / best[2]:.2f} |")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="small sizes")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--host", action="store_true", help="host timings only")
    which.add_argument("--riscv64", action="store_true", help="riscv64 instruction counts only")
    which.add_argument("--team", action="store_true", help="a one-program parallel loop on 1 and 2 threads only")
    parser.add_argument("--one-thread", action="store_true", help="host timings on one thread only")
    args = parser.parse_args()
    os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="spine-bench-cache-"))
    if args.team:
        team(args.quick)
        return
    if not args.riscv64:
        host(args.quick, args.one_thread)
    if not args.host:
        riscv64(args.quick)


if __name__ == "__main__":
    main()
