"""Which register-blocked micro-kernel `smt.dot` uses on which target, and the instruction set of each.

Every micro-kernel below is the same outer-product scheme at a different vector width: an accumulator
tile of `rows` x `vectors` vector registers stays in registers over the whole reduction; each step loads
`vectors` vectors of B and `rows` scalars of A and issues rows * vectors vector FMAs (see
to_linalg/smt_microkernel.py, which emits it in MLIR's vector dialect). What differs per target is only
what fits the register file:

    rvv          RVV 1.0, LMUL 1, vector length known at run time (VLEN 128 ... 1024): 6 x 4 of the 32
                 vector registers hold accumulators, one LMUL-4 group holds B (loaded with one whole-register
                 load), A scalars come from f-registers (vfmacc.vf)
    avx512       AVX-512F: 14 x 2 of the 32 zmm registers hold accumulators (A broadcast from memory)
    avx2         AVX2 + FMA: 6 x 2 of the 16 ymm registers; "avx2-zen", AMD's cores without AVX-512, also
                 prefetches the next k tile (prefetch_next_k)
    sse          x86-64 without AVX: 4 x 2 xmm registers (multiply and add)
    portable     no vector unit known (e.g. riscv64 without V): 4 x 2 four-lane vectors LLVM lowers to
                 scalar code

    ime          SpacemiT K1's matrix unit (IME, VLEN 256): int8 x int8 -> int32 products only, on 4x8x4 tiles
                 of `smt.vmadot`, 2 x 4 tiles (8 rows, 16 columns) per register block; its own emitter,
                 to_linalg/ime_matmul.py. A target's entry names it as its `int8` kernel ("rvv-ime": RVV for
                 every other type). A tl.dot of at most 4 rows (a token's product) runs on it too, column
                 tile by column tile with B read as B^T where it lies: to_linalg/ime_rows.py
    a100         SpacemiT K3's A100 matrix unit (VLEN 1024): int8 x int8 -> int32 on 8x16x8 tiles of `smt.vmadot`
                 and fp16 x fp16 -> fp32 on 8x8x8 tiles of `smt.vfwmadot` (not in LLVM 22: emitted by its
                 encoding), 2 x 4 tiles (16 rows, 32 columns) per register block; ime_matmul.py again, at the
                 A100's tile shapes. "rvv-a100" names it for both types. bf16 stays on RVV: the instruction
                 reads bf16 only while the core's MCPM.BF16 control bit is set, which user code cannot set or
                 read (the specification documents no user-level access), and with it clear, as A100 user
                 code finds it, it reads fp16
    amx          Intel's AMX (Sapphire Rapids and later): int8 -> int32 and bf16 -> fp32 products on 16 x 16
                 tiles of `tdpbssd` / `tdpbf16ps`, 2 x 2 tiles (32 rows, 32 columns) per register block; its
                 own emitter, to_linalg/amx_matmul.py. "avx512-amx" names it for both types, AVX-512 for the rest
    vnni         AVX-512's dot products for CPUs without AMX (Ice Lake, Zen 4): int8 on `vpdpbusd` (AVX512-VNNI),
                 bf16 on `vdpbf16ps` (AVX512-BF16), 8 x 2 vectors per register block; to_linalg/vnni_matmul.py.
                 "avx512-vnni" names it for int8, "avx512-vnni-bf16" for both (AMD's cores only)
    avxvnni      the same for int8 on AVX-VNNI's 256-bit `vpdpbusd` (Alder Lake and later, without AVX-512),
                 6 x 2 ymm vectors per register block; "avx2-vnni" names it, AVX2's FMA kernel for the rest

`choose` is the only place that maps a target to an entry.

The choice is made in the kernel frontend, where triton's compile options name the target, and travels to
the conversion as an attribute of each smt.dot call (to_linalg/smt_calls.py), so the conversion and the
lowering need not know the target themselves.

Lanes count accumulator elements of 32 bits (fp32, int32) per register, per `vscale` when scalable;
64-bit accumulators (fp64) get half as many.
"""
from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class MicroKernel:
    name: str          # what smt.dot calls record
    isa: str           # the instructions its inner loop is made of
    lanes: int         # 32-bit accumulator elements per vector register (per vscale unit when scalable)
    scalable: bool     # the vector length is a run-time multiple of `lanes` (RVV)
    rows: int          # accumulator rows (MR): A scalars loaded per reduction step
    vectors: int       # accumulator vectors per row (NV): B vectors loaded per reduction step
    fma: bool = True   # fused multiply-add instructions exist (else multiply, then add)
    a_rows: bool = False  # A panels row by row (broadcasts at constant displacements: x86) instead of
                          # step by step (the MR scalars of a step at small immediate offsets: RVV)
    kc: int = 256      # reduction steps per block: a block's KC x NR part of a B panel stays in L1
    unroll: int = 4    # reduction steps per loop iteration
    min_rows: int = 0  # fewer accumulator rows a product may use when they pad its rows less (0: `rows` only)
    shuffle_transposes: bool = False  # tiles loaded across their source's rows are transposed in registers
                                      # (to_linalg/tile_copy.py): x86, whose only strided stores are scatters
    int8: str = ""     # the entry int8 x int8 -> int32 products use instead, on a target with a matrix unit
    bf16: str = ""     # the entry bf16 x bf16 -> fp32 products use instead, likewise
    fp16: str = ""     # the entry fp16 x fp16 -> fp32 products use instead, likewise
    matrix_unit: bool = False  # computes on a matrix instruction's tiles (own emitter), not by outer products
    prefetch_next_k: bool = False  # a call that packs an A it could not read in place prefetches the next k
                                   # tile of A and B while it multiplies (smt_microkernel._next_k_tiles): AMD's
                                   # cores only (Zen 3, Zen 4: faster; a Sapphire Rapids Xeon: slower)

    @property
    def transpose_lanes(self) -> int:
        """The widest block this target transposes 32-bit tiles by in registers (0: it does not)."""
        return self.lanes if self.shuffle_transposes else 0

    def for_rows(self, m: int) -> "MicroKernel":
        """This kernel with the register block's row count (between min_rows and rows) that pads m rows
        least, the larger on ties: a block of 256 rows in panels of 14 computes 266 of them."""
        if not self.min_rows:
            return self
        best = min(range(self.min_rows, self.rows + 1), key=lambda r: (-(-m // r) * r, -r))
        return self if best == self.rows else replace(self, rows=best)


MICROKERNELS = {mk.name: mk for mk in (
    MicroKernel("rvv", "RVV 1.0 vfmacc.vf, LMUL 1 (vector length agnostic)", 2, True, 6, 4),
    MicroKernel("rvv-ime", "RVV 1.0 vfmacc.vf, LMUL 1; int8 products on SpacemiT IME", 2, True, 6, 4, int8="ime"),
    MicroKernel("ime", "SpacemiT IME smt.vmadot, int8 4x8x4 tiles, VLEN 256", 8, False, 8, 4, matrix_unit=True),
    MicroKernel("rvv-a100", "RVV 1.0 vfmacc.vf, LMUL 1; int8 and fp16 products on SpacemiT A100's matrix unit", 2,
                True, 6, 4, int8="a100", fp16="a100"),
    MicroKernel("a100", "SpacemiT A100 smt.vmadot (int8 8x16x8) / smt.vfwmadot (fp16 8x8x8), VLEN 1024", 32, False,
                16, 4, matrix_unit=True),
    MicroKernel("avx512", "AVX-512F vfmadd231ps, 512-bit", 16, False, 14, 2, a_rows=True, min_rows=8,
                shuffle_transposes=True),
    MicroKernel("avx2", "AVX2 + FMA vfmadd231ps, 256-bit", 8, False, 6, 2, a_rows=True, min_rows=4,
                shuffle_transposes=True),
    MicroKernel("avx2-zen", "AVX2 + FMA vfmadd231ps, 256-bit, the next k tile prefetched", 8, False, 6, 2,
                a_rows=True, min_rows=4, shuffle_transposes=True, prefetch_next_k=True),
    MicroKernel("avx512-amx", "AVX-512F vfmadd231ps; int8 and bf16 products on AMX tiles", 16, False, 14, 2,
                a_rows=True, min_rows=8, shuffle_transposes=True, int8="amx", bf16="amx"),
    MicroKernel("amx", "Intel AMX tdpbssd / tdpbf16ps, 16x16 tiles, 2 x 2 per register block", 16, False, 32, 2,
                matrix_unit=True),
    MicroKernel("avx512-vnni", "AVX-512F vfmadd231ps; int8 products on AVX512-VNNI", 16, False, 14, 2,
                a_rows=True, min_rows=8, shuffle_transposes=True, int8="vnni"),
    MicroKernel("avx512-vnni-bf16", "AVX-512F vfmadd231ps; int8 products on AVX512-VNNI, bf16 on AVX512-BF16", 16,
                False, 14, 2, a_rows=True, min_rows=8, shuffle_transposes=True, prefetch_next_k=True, int8="vnni",
                bf16="vnni"),
    MicroKernel("vnni", "AVX-512 vpdpbusd (int8) / vdpbf16ps (bf16) dot products, 8 x 32 per register block", 16,
                False, 8, 2, matrix_unit=True),
    MicroKernel("avx2-vnni", "AVX2 + FMA vfmadd231ps, 256-bit; int8 products on AVX-VNNI", 8, False, 6, 2,
                a_rows=True, min_rows=4, shuffle_transposes=True, int8="avxvnni"),
    MicroKernel("avxvnni", "AVX-VNNI vpdpbusd ymm dot products (int8), 6 x 16 per register block", 8, False, 6, 2,
                matrix_unit=True),
    MicroKernel("sse", "SSE2 mulps + addps, 128-bit", 4, False, 4, 2, fma=False),
    MicroKernel("portable", "no vector unit: four-lane vectors LLVM splits into scalars", 4, False, 4, 2),
)}


def choose(triple: str, cpu: str, features: str, matrix_unit: bool = True) -> MicroKernel:
    """The micro-kernel for code built for `triple`, `cpu` with LLVM `features` (an empty feature string
    means the CPU's own features; a RISC-V CPU not known to have V gets the portable kernel: scalable
    vectors on a CPU without V would not compile, fixed ones always do). K1's matrix unit needs its
    instructions (XSMTVDot) and VLEN 256 known, K3 A100's XSMTVDot and VLEN 1024 (the only cores that have
    both: spacemit_cores.py gives them to `spacemit-a100`), an x86 CPU's AMX its tile, int8 and bf16 features, its dot
    products AVX512-VNNI (and AVX512-BF16); all need `matrix_unit` (the compile's option, SPINE_MATRIX_UNIT)."""
    from .targets import cpu_features
    enabled = cpu_features(triple, cpu, features)
    if triple.startswith("riscv64"):
        if "+v" not in enabled:
            return MICROKERNELS["portable"]
        if "+xsmtvdot" not in enabled or not matrix_unit:
            return MICROKERNELS["rvv"]
        if "+zvl1024b" in enabled:
            return MICROKERNELS["rvv-a100"]
        return MICROKERNELS["rvv-ime" if "+zvl256b" in enabled else "rvv"]
    if triple.startswith(("x86_64", "i686")):
        if "+avx512f" in enabled:
            return MICROKERNELS[_avx512_kernel(enabled, cpu) if matrix_unit else "avx512"]
        if {"+avx2", "+fma"} <= enabled:
            return MICROKERNELS["avx2-vnni" if "+avxvnni" in enabled and matrix_unit else _avx2_kernel(cpu)]
        return MICROKERNELS["sse"]
    return MICROKERNELS["portable"]


def _avx2_kernel(cpu: str) -> str:
    """AMD's cores without AVX-512 (Zen 1-3) take the AVX2 entry that prefetches the next k tile: on a Zen 3
    (EPYC), fp32 1024^3 in 64 x 64 x 64 and 128 x 128 x 64 tiles, one thread, 2-8 % faster in two runs
    (bench/RESULTS.md). Intel's AVX2 cores were not measured with it, and on a Sapphire Rapids Xeon the
    AVX-512 kernel's prefetch was slower: they keep the plain one."""
    from .targets import is_amd
    return "avx2-zen" if is_amd(cpu) else "avx2"


def _avx512_kernel(enabled: frozenset, cpu: str) -> str:
    """The AVX-512 entry for a CPU's instructions for narrow products: AMX tiles, else VNNI (and BF16) dot
    products, else none. bf16 takes vdpbf16ps on AMD's cores only: on an Intel Xeon (bench/RESULTS.md) it
    ran at 0.63 of the FMA kernel's speed (98 against 155 GFLOP/s), and Intel's cores that have it and no
    AMX are few (Cooper Lake). Zen 4 and 5 run it at the FMA's rate with twice the products per
    instruction; on a Zen 4, bf16 tl.dot ran at torch's speed (bench/RESULTS.md). AMD's entry also takes
    prefetch_next_k."""
    from .targets import is_amd
    if {"+amx-tile", "+amx-int8", "+amx-bf16"} <= enabled:
        return "avx512-amx"
    if "+avx512vnni" in enabled:
        return "avx512-vnni-bf16" if "+avx512bf16" in enabled and is_amd(cpu) else "avx512-vnni"
    return "avx512"
