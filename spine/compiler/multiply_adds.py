"""Products that may fuse into the sums that consume them, marked `contract`, so that LLVM emits fused
multiply-adds (vfmadd on x86, vfmacc on RISC-V) for them.

Triton's `enable_fp_fusion` (on by default) lets a backend compute `a * b + c` with one rounding, as every
GPU backend does (ptxas fuses unless told `--fmad=false`). LLVM fuses an fmul into the fadd that uses it
only when both carry the `contract` flag; without it a GEMV step such as `acc += q * x * d` costs a
multiply and an add where one instruction does both (the Q4_1 decode GEMV: five floating-point operations
a vector of weights against three). A product is marked only when its one use is an add or a subtract:
fusing a product that is also used elsewhere would compute it twice, rounded and not.

    %p = arith.mulf %a, %b : vector<16xf32>                 %p = arith.mulf %a, %b fastmath<contract>
    %s = arith.addf %acc, %p fastmath<reassoc>      =>      %s = arith.addf %acc, %p fastmath<reassoc,contract>

The pass runs only where the kernel allows fusion and the CPU has fused multiply-adds (LoweringChoices):
elsewhere LLVM would call the C library's fma for each fused pair."""
from __future__ import annotations

from ..ir_walk import collect_ops

_SUMS = ("arith.addf", "arith.subf")


def contract_multiply_adds(module) -> None:
    for product in collect_ops(module, lambda op: op.name == "arith.mulf"):
        uses = list(product.results[0].uses)
        if len(uses) == 1 and uses[0].owner.name in _SUMS:
            _add_flag(product, "contract")
            _add_flag(uses[0].owner, "contract")


def _add_flag(op, flag: str) -> None:
    """Adds `flag` to the op's arith fastmath flags, keeping those it has."""
    from mlir import ir
    flags = []
    if "fastmath" in op.attributes:
        text = str(op.attributes["fastmath"])   # #arith.fastmath<reassoc,nsz> or #arith.fastmath<none>
        flags = [f for f in text[text.index("<") + 1:text.rindex(">")].split(",") if f and f != "none"]
    if flag in flags or "fast" in flags:
        return
    op.attributes["fastmath"] = ir.Attribute.parse(f"#arith.fastmath<{','.join(flags + [flag])}>")
