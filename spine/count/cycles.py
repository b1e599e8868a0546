"""Estimated cycles and multiply-accumulates of a counted launch, for SpacemiT's X60 core (K1).

Every executed instruction is put in a class (`classify`, from its encoding) and each class occupies one of
the core's execution resources for some cycles. The table is LLVM's scheduling model for the X60
(llvm/lib/Target/RISCV/RISCVSchedSpacemitX60.td, "based on documentation of the C908 and experiments on
real hardware (bpi-f3)"): its resources, how many of each, and the cycles each class holds one
(ReleaseAtCycles, 1 where the model gives none). The model holds them constant in LMUL (its worst case),
so this estimate does too:

    resource   units   classes (cycles each)
    IEU        2       integer ALU, shifts, branches, multiplies, vsetvl (1); divides (12 32-bit, 20 64-bit)
    LS         2       scalar and floating-point loads and stores, atomics (1)
    FP         1       scalar floating point (1); fdiv and fsqrt (12 half, 15 single, 22 double)
    VLS        1       vector loads and stores of every kind (1)
    VIEU       1       vector integer arithmetic, logic, shifts, compares, merges (4); multiplies and
                       multiply-adds (7); widening (4); divides (12); reductions, permutations, masks (1)
    VFP        1       vector floating point, fused multiply-adds included (1)
    MATRIX     1       smt.vmadot* (1: an assumption, no figure is published per instruction; SpacemiT
                       gives about 2 TOPS int8 for cluster 0's four cores, ~0.8 cycles per vmadot at 1.6 GHz);
                       K3 A100's smt.vfwmadot* (1, the same assumption)

The X60 issues two instructions a cycle, in order. The estimate is the larger of the instructions over
two and the busiest resource's cycles over its units: a bound from throughput alone, without latencies
(an in-order core waits for them), cache misses or branch mispredictions; it compares code for the same
core, it does not predict a board's time.

Multiply-accumulates are counted from the instructions that do them: vector multiply-adds (vfmacc,
vmacc, their widening forms and vfmadd/vmadd) at the full vector length of the vtype that the nearest
executed vsetvli before them in the code sets (an upper bound at loops' tails; VLEN from QEMU's -cpu),
scalar fused multiply-adds (1), smt.vmadot (4 x 8 x 4 = 128 at K1's VLEN 256, 8 x 16 x 8 = 1,024 at K3 A100's
VLEN 1024) and smt.vfwmadot (A100 only: 8 x 8 x 8 = 512).

K3's cores have no scheduling model in LLVM 22: code for the A100 (VLEN 1024) is estimated with the X60's
table above, an assumption (same issue width and units, each matrix instruction one cycle) that makes the
estimate a comparison of the A100's own code paths (with and without its matrix unit), not a prediction."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

ISSUE_WIDTH = 2
UNITS = {"IEU": 2, "LS": 2, "FP": 1, "VLS": 1, "VIEU": 1, "VFP": 1, "MATRIX": 1}
# class -> (resource, cycles it holds one unit)
COSTS = {
    "alu": ("IEU", 1), "branch": ("IEU", 1), "mul": ("IEU", 1), "div32": ("IEU", 12), "div64": ("IEU", 20),
    "vset": ("IEU", 1),
    "load": ("LS", 1), "store": ("LS", 1), "atomic": ("LS", 1),
    "fp": ("FP", 1), "fma": ("FP", 1), "fdiv16": ("FP", 12), "fdiv32": ("FP", 15), "fdiv64": ("FP", 22),
    "vload": ("VLS", 1), "vstore": ("VLS", 1),
    "vint": ("VIEU", 4), "vmul": ("VIEU", 7), "vmacc": ("VIEU", 7), "vwide": ("VIEU", 4), "vwmacc": ("VIEU", 4),
    "vdiv": ("VIEU", 12), "vother": ("VIEU", 1),
    "vfp": ("VFP", 1), "vfma": ("VFP", 1), "vfwma": ("VFP", 1),
    "vmadot": ("MATRIX", 1), "vfwmadot": ("MATRIX", 1),
}
VFWMADOT_FUNCT7 = 0b1001111     # smt.vfwmadot*: [31:25], funct3 100 .. 111 (the specification's 8.5)


def matrix_macs(cls: str, vlen: int) -> int:
    """Multiply-accumulates of one matrix instruction at `vlen` (its tile: the specification's 2.5)."""
    if cls == "vfwmadot":
        return 8 * 8 * 8
    return 8 * 16 * 8 if vlen >= 1024 else 4 * 8 * 4
OP_V, LOAD_FP, STORE_FP, CUSTOM1 = 0x57, 0x07, 0x27, 0x2b
_VECTOR_WIDTHS = (0, 5, 6, 7)


def _compressed(half: int) -> str:
    """The class of a 16-bit instruction (RVC): quadrant (bits 1:0) and funct3 (15:13)."""
    quadrant, funct3 = half & 0b11, (half >> 13) & 0b111
    if quadrant == 0:
        return "alu" if funct3 == 0 else "load" if funct3 < 4 else "store"
    if quadrant == 1:
        return "branch" if funct3 in (5, 6, 7) else "alu"
    if funct3 in (1, 2, 3):
        return "load"
    if funct3 in (5, 6, 7):
        return "store"
    if funct3 == 4 and (half >> 2) & 0x1f == 0 and (half >> 7) & 0x1f:   # c.jr / c.jalr
        return "branch"
    return "alu"


def _op_fp(word: int) -> str:
    funct5, fmt = word >> 27, (word >> 25) & 0b11
    if funct5 in (0x03, 0x0b):                     # fdiv, fsqrt
        return {0: "fdiv32", 1: "fdiv64", 2: "fdiv16"}.get(fmt, "fdiv64")
    return "fp"


def _op_v(word: int) -> str:
    funct3, funct6 = (word >> 12) & 0b111, word >> 26
    if funct3 == 7:
        return "vset"
    if funct3 in (1, 5):                           # OPFVV, OPFVF
        if 0b101000 <= funct6 <= 0b101111:
            return "vfma"
        if 0b111100 <= funct6 <= 0b111111:
            return "vfwma"
        return "vfp"
    if funct3 in (2, 6):                           # OPMVV, OPMVX
        if funct6 in (0b101001, 0b101011, 0b101101, 0b101111):
            return "vmacc"
        if 0b100100 <= funct6 <= 0b100111:
            return "vmul"
        if 0b100000 <= funct6 <= 0b100011:
            return "vdiv"
        if 0b111100 <= funct6 <= 0b111111:
            return "vwmacc"
        if 0b110000 <= funct6 <= 0b111011:
            return "vwide"
        if funct6 == 0b010010:                     # vzext / vsext
            return "vint"
        return "vother"                            # reductions, masks, moves to scalars, averaging
    # OPIVV, OPIVX, OPIVI
    if funct6 in (0b001100, 0b001110, 0b001111) or (funct3 == 3 and funct6 == 0b100111):
        return "vother"                            # gathers, slides, whole-register moves
    if 0b100000 <= funct6 <= 0b100111 and funct6 != 0b100100:
        return "vother"                            # saturating add/sub, vsmul (the model gives 1)
    return "vint"


def classify(word: int) -> str:
    """The cost class of an RV64GCV (+ XSMTVDot) instruction word (the low 16 bits of a compressed one)."""
    if word & 0b11 != 0b11:
        return _compressed(word & 0xffff)
    opcode, funct3 = word & 0x7f, (word >> 12) & 0b111
    if opcode == 0x03:
        return "load"
    if opcode == LOAD_FP:
        return "vload" if funct3 in _VECTOR_WIDTHS else "load"
    if opcode == 0x23:
        return "store"
    if opcode == STORE_FP:
        return "vstore" if funct3 in _VECTOR_WIDTHS else "store"
    if opcode in (0x33, 0x3b) and word >> 25 == 1:   # the M extension
        if funct3 < 4:
            return "mul"
        return "div32" if opcode == 0x3b else "div64"
    if opcode in (0x63, 0x6f, 0x67):
        return "branch"
    if opcode == 0x2f:
        return "atomic"
    if opcode in (0x43, 0x47, 0x4b, 0x4f):
        return "fma"
    if opcode == 0x53:
        return _op_fp(word)
    if opcode == OP_V:
        return _op_v(word)
    if opcode == CUSTOM1 and word >> 25 == VFWMADOT_FUNCT7 and funct3 >= 4:
        return "vfwmadot"
    if opcode == CUSTOM1 and (word >> 26) & 0b111 in (0, 1):
        return "vmadot"
    return "alu"


def vsetvli_lanes(word: int, vlen: int):
    """The elements of a full vector group under the vtype a vsetvli / vsetivli sets, or None (vsetvl, whose
    vtype is in a register)."""
    if word & 0x7f != OP_V or (word >> 12) & 0b111 != 7 or word >> 31 == 1 and (word >> 30) & 1 == 0:
        return None
    vtypei = (word >> 20) & (0x3ff if word >> 31 else 0x7ff)
    sew = 8 << ((vtypei >> 3) & 0b111)
    lmul = vtypei & 0b111
    groups = (1 << lmul) if lmul < 4 else 1.0 / (1 << (8 - lmul))
    return max(1, int(vlen * groups) // sew)


@dataclass(frozen=True)
class CycleEstimate:
    cycles: float                       # the X60 estimate (see the module's docstring)
    busy: dict                          # resource -> cycles of occupancy over its units
    classes: dict = field(default_factory=dict)    # class -> instructions executed
    macs: int = 0                       # multiply-accumulates

    @property
    def bound_by(self) -> str:
        issue = sum(self.classes.values()) / ISSUE_WIDTH
        resource = max(self.busy, key=self.busy.get) if self.busy else "issue"
        return "issue" if not self.busy or issue >= self.busy[resource] else resource


def estimate(counts: dict, code_at, lo: int, hi: int, vlen: int) -> CycleEstimate:
    """The estimate for a launch that executed `counts` (address -> times) of the kernel's code [lo, hi);
    code_at(pc) gives the 32-bit word at pc (its low half for a compressed instruction)."""
    classes, macs = Counter(), 0
    lanes = vlen // 32              # before any vsetvli: e32, LMUL 1
    for pc in sorted(a for a in counts if lo <= a < hi):  # executed addresses: instruction starts, in order
        n, word = counts[pc], code_at(pc)
        cls = classify(word)
        classes[cls] += n
        if cls == "vset":
            lanes = vsetvli_lanes(word, vlen) or lanes
        elif cls in ("vfma", "vfwma", "vmacc", "vwmacc"):
            macs += n * lanes
        elif cls == "fma":
            macs += n
        elif cls in ("vmadot", "vfwmadot"):
            macs += n * matrix_macs(cls, vlen)
    cycles, per_unit = cycles_of(classes)
    return CycleEstimate(cycles, per_unit, dict(classes), macs)


def cycles_of(classes: dict) -> tuple[float, dict]:
    """The estimate for instructions executed in these classes (class -> times), and each resource's busy
    cycles per unit."""
    busy = Counter()
    for cls, n in classes.items():
        resource, cycles = COSTS[cls]
        busy[resource] += n * cycles
    per_unit = {r: c / UNITS[r] for r, c in busy.items()}
    return max([sum(classes.values()) / ISSUE_WIDTH] + list(per_unit.values())), per_unit


def classes_of_words(word_counts: dict) -> Counter:
    """Instruction words -> times executed (a program counted whole, whose code order is not known) as
    classes -> times: enough for cycles_of, not for multiply-accumulates (they need the vsetvli before each)."""
    classes = Counter()
    for word, n in word_counts.items():
        classes[classify(word)] += n
    return classes
