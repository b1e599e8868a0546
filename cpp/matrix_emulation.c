/* See matrix_emulation.h. Written by hand: QEMU does not implement SpacemiT's vendor instructions and no
 * library emulates them. The semantics are those of SpacemiT's "AI Matrix Extension (Zvvm_spacemit)"
 * v0.6, chapters 5.1, 5.2 and 8.1-8.2 (integer base path and sliding window, int8):
 *
 *     for p in 0 .. M*N-1:                   C, row-major, in the register pair vd, vd+1 (int32)
 *         i = (p / N) * K;  j = (p % N) * K  A row-major in vs1, B column-major in vs2 (int8)
 *         vd[p] += sum over q < K of vs1[i + q + slide*K] * vs2[j + q]
 *
 * with M = N = 4, K = 8 at VLEN 256 (K1's A60/X60) and M = N = 8, K = 16 at VLEN 1024 (K3's A100); the
 * sliding forms read A from the pair vs1, vs1+1. And K3 A100's floating-point path, 6.1-6.2 and 8.5
 * (`smt.vfwmadot`, `smt.vfwmadot1/2/3`: VLEN 1024 only), the same loop with M = N = K = 8 over fp16
 * operands and fp32 sums, each product added in turn:
 *
 *         vd[p] = vd[p] + (fp32)vs1[i + q + slide*K] * (fp32)vs2[j + q]
 *
 * The operands are fp16 as the core reads them with its MCPM.BF16 control bit clear: the bit selects bf16
 * instead, and user code has no documented way to set it (Spine emits the instruction for fp16 only). An
 * fp16 product is exact in fp32 (22 significant bits), so fusing the add would round the same.
 * And the A100's two layout instructions the matrix kernels use around it (7.3, 7.4, 8.6.1: `smt.vpack.vv`
 * and `smt.vupack.vv`, LMUL 1), which move chunks of pack_len bits (imm2: SEW, 128, 256, 512): vpack
 * interleaves the chunks of vs1 and vs2 into the pair vd, vd+1,
 *
 *         vd:vd+1 = vs1[0], vs2[0], vs1[1], vs2[1], ...                    (chunk by chunk)
 *
 * and vupack undoes it, the even chunks of vs1 then those of vs2 into vd, the odd ones into vd+1:
 *
 *         vd   = vs1[0], vs1[2], ..., vs2[0], vs2[2], ...
 *         vd+1 = vs1[1], vs1[3], ..., vs2[1], vs2[3], ...
 *
 * (the specification's pseudo-code counts these chunks partly in bits, partly in elements; this reading is
 * the one SpacemiT's own IME2 kernels compute exact products with, bench/llama_cpp.py's ime2 check).
 * tests/driver/test_matrix_emulation.py checks it against the specification's own worked examples and its
 * pseudo-code.
 *
 * The handler is compiled without V: the compiler never touches a vector register here, so the register
 * file (and vl, vtype) stays as the interrupted code left it until the whole-register loads at the end. */
#define _GNU_SOURCE
#include "matrix_emulation.h"

#if defined(__riscv) && __riscv_xlen == 64
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <ucontext.h>

#define OPCODE_CUSTOM1 0x2b
#define MAX_VLENB 128

/* Initial-exec TLS: a signal handler must not call __tls_get_addr, which may allocate. */
static __thread __attribute__((tls_model("initial-exec"), aligned(64))) uint8_t registers[32 * MAX_VLENB];

static uint64_t read_vlenb(void) {
    uint64_t v;
    __asm__ volatile(".option push\n.option arch, +v\ncsrr %0, vlenb\n.option pop" : "=r"(v));
    return v;
}

static uint64_t read_vtype(void) {
    uint64_t v;
    __asm__ volatile(".option push\n.option arch, +v\ncsrr %0, vtype\n.option pop" : "=r"(v));
    return v;
}

/* Whole-register stores and loads ignore vl and vtype: the interrupted code's settings stay untouched. */
static void store_registers(uint8_t *p, uint64_t group) {
    __asm__ volatile(".option push\n.option arch, +v\n"
                     "vs8r.v v0, (%0)\nvs8r.v v8, (%1)\nvs8r.v v16, (%2)\nvs8r.v v24, (%3)\n.option pop"
                     :: "r"(p), "r"(p + group), "r"(p + 2 * group), "r"(p + 3 * group) : "memory");
}

static void load_registers(const uint8_t *p, uint64_t group) {
    __asm__ volatile(".option push\n.option arch, +v\n"
                     "vl8re8.v v0, (%0)\nvl8re8.v v8, (%1)\nvl8re8.v v16, (%2)\nvl8re8.v v24, (%3)\n.option pop"
                     :: "r"(p), "r"(p + group), "r"(p + 2 * group), "r"(p + 3 * group) : "memory");
}

/* Whether registers a signal handler changes reach the interrupted code: so under QEMU user mode, which
 * neither saves the vector registers in the signal frame nor touches them across system calls; not so on a
 * Linux kernel, which restores them from the frame (and may discard them at a system call). Tried once,
 * outside any handler: v1 set, a signal whose handler sets it again, v1 read back. */
static void probe_handler(int sig) {
    (void)sig;
    __asm__ volatile(".option push\n.option arch, +v\nvsetivli zero, 1, e64, m1, ta, ma\nvmv.v.i v1, 7\n"
                     ".option pop" ::: "memory");
}

static int handler_registers_persist(void) {
    struct sigaction probe, old;
    memset(&probe, 0, sizeof probe);
    probe.sa_handler = probe_handler;
    sigemptyset(&probe.sa_mask);
    if (sigaction(SIGUSR2, &probe, &old)) return 0;
    uint64_t seen = 0;
    __asm__ volatile(".option push\n.option arch, +v\nvsetivli zero, 1, e64, m1, ta, ma\nvmv.v.i v1, 3\n"
                     ".option pop" ::: "memory");
    raise(SIGUSR2);
    __asm__ volatile(".option push\n.option arch, +v\nvsetivli zero, 1, e64, m1, ta, ma\nvmv.x.s %0, v1\n"
                     ".option pop" : "=r"(seen) :: "memory");
    sigaction(SIGUSR2, &old, NULL);
    return seen == 7;
}

static _Atomic int enabled;
static atomic_ulong emulated;

int spine_matrix_emulation_enable(void) {
    if (!enabled) enabled = handler_registers_persist();
    return enabled;
}

typedef struct {
    unsigned vd, vs1, vs2;
    int a_signed, b_signed;
    int slide;
    int fp16;            /* smt.vfwmadot*: fp16 operands, fp32 sums */
    int layout;          /* 1 smt.vpack.vv, 2 smt.vupack.vv */
    unsigned imm2;       /* the layout instructions' chunk size: SEW, 128, 256 or 512 bits */
} madot_t;

#define FUNCT7_VPACK 0x33      /* [31:26] = 011001, [25] = 1 */

#define FUNCT7_VFWMADOT 0x4f   /* [31:25] = 1001111 */

/* Decodes vfwmadot (funct3 100) and vfwmadot1/2/3 (101, 110, 111; vs1 even). */
static int decode_float(uint32_t insn, madot_t *d) {
    unsigned funct3 = (insn >> 12) & 7;
    if (funct3 < 4) return 0;
    d->vd = (insn >> 7) & 31;
    d->vs1 = (insn >> 15) & 31;
    d->vs2 = (insn >> 20) & 31;
    d->slide = (int)funct3 - 4;
    d->fp16 = 1;
    d->a_signed = d->b_signed = 1;
    return !(d->slide && (d->vs1 & 1));
}

/* Decodes vmadot* (funct [28:26] = 000) and vmadot1/2/3* (001), int8 only, and the floating-point forms;
 * 0 for anything else. */
static int decode(uint32_t insn, madot_t *d) {
    if ((insn & 0x7f) != OPCODE_CUSTOM1) return 0;
    d->layout = 0;
    if ((insn >> 25) == FUNCT7_VFWMADOT) return decode_float(insn, d);
    if ((insn >> 25) == FUNCT7_VPACK) {
        unsigned funct3 = (insn >> 12) & 7;
        d->vd = (insn >> 7) & 31;
        d->vs1 = (insn >> 15) & 31;
        d->vs2 = (insn >> 20) & 31;
        d->layout = funct3 & 4 ? 2 : 1;
        d->imm2 = funct3 & 3;
        d->slide = d->fp16 = 0;
        return 1;
    }
    if (!(insn >> 31) || ((insn >> 29) & 3) != 3 || !((insn >> 25) & 1))
        return 0;
    unsigned group = (insn >> 26) & 7, funct3 = (insn >> 12) & 7;
    d->vd = (insn >> 7) & 31;
    d->vs2 = (insn >> 20) & 31;
    d->fp16 = 0;
    if (group == 0) {
        if (funct3 > 3) return 0;
        d->vs1 = (insn >> 15) & 31;
        d->slide = 0;
    } else if (group == 1) {
        unsigned slide = ((insn >> 15) & 1) << 1 | funct3 >> 2;   /* [15:14] */
        if (slide == 3) return 0;
        d->vs1 = ((insn >> 16) & 15) << 1;
        d->slide = (int)slide + 1;
    } else {
        return 0;
    }
    d->a_signed = (funct3 >> 1) & 1;   /* 00 u*u, 01 u*s, 10 s*u, 11 s*s */
    d->b_signed = funct3 & 1;
    return 1;
}

static int overlaps(unsigned first, unsigned count, unsigned reg) { return reg >= first && reg < first + count; }

static int32_t element(const uint8_t *p, int is_signed) { return is_signed ? (int8_t)*p : (int32_t)*p; }

static void multiply_accumulate(uint8_t *file, uint64_t vlenb, const madot_t *d) {
    unsigned tile = vlenb == 32 ? 4 : 8, k = vlenb == 32 ? 8 : 16;
    const uint8_t *a = file + d->vs1 * vlenb, *b = file + d->vs2 * vlenb;
    uint8_t *c = file + d->vd * vlenb;
    for (unsigned p = 0; p < tile * tile; p++) {
        const uint8_t *row = a + (p / tile) * k + d->slide * k, *col = b + (p % tile) * k;
        uint32_t sum;
        memcpy(&sum, c + 4 * p, 4);
        for (unsigned q = 0; q < k; q++)   /* wraps modulo 2^32, as the 32-bit accumulator does */
            sum += (uint32_t)(element(row + q, d->a_signed) * element(col + q, d->b_signed));
        memcpy(c + 4 * p, &sum, 4);
    }
}

/* IEEE binary16 to binary32, exactly (subnormals, infinities and NaNs included), without Zfh: the handler
 * must run on any RV64GC guest. */
static float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exponent = (h >> 10) & 0x1f, fraction = h & 0x3ff, bits;
    if (exponent == 0x1f) {
        bits = sign | 0x7f800000u | fraction << 13;
    } else if (exponent) {
        bits = sign | (exponent + 112) << 23 | fraction << 13;
    } else if (fraction) {                 /* subnormal: normalise */
        int shift = 0;
        while (!(fraction & 0x400)) { fraction <<= 1; shift++; }
        bits = sign | (uint32_t)(113 - shift) << 23 | (fraction & 0x3ff) << 13;
    } else {
        bits = sign;
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static void float_multiply_accumulate(uint8_t *file, uint64_t vlenb, const madot_t *d) {
    const unsigned tile = 8, k = 8;
    const uint8_t *a = file + d->vs1 * vlenb, *b = file + d->vs2 * vlenb;
    uint8_t *c = file + d->vd * vlenb;
    for (unsigned p = 0; p < tile * tile; p++) {
        unsigned i = (p / tile) * k + (unsigned)d->slide * k, j = (p % tile) * k;
        float sum;
        memcpy(&sum, c + 4 * p, 4);
        for (unsigned q = 0; q < k; q++) {
            uint16_t x, y;
            memcpy(&x, a + 2 * (i + q), 2);
            memcpy(&y, b + 2 * (j + q), 2);
            sum = sum + half_to_float(x) * half_to_float(y);
        }
        memcpy(c + 4 * p, &sum, 4);
    }
}

/* vpack / vupack over the snapshot `file` (sources read from it, the pair written after), chunks of
 * `chunk` bytes. */
static void layout_transform(uint8_t *file, uint64_t vlenb, const madot_t *d, unsigned chunk) {
    static __thread __attribute__((tls_model("initial-exec"))) uint8_t out[2 * MAX_VLENB];
    const uint8_t *a = file + d->vs1 * vlenb, *b = file + d->vs2 * vlenb;
    if (d->layout == 1) {
        for (unsigned p = 0; p < vlenb / chunk; p++) {
            memcpy(out + 2 * p * chunk, a + p * chunk, chunk);
            memcpy(out + 2 * p * chunk + chunk, b + p * chunk, chunk);
        }
    } else {
        unsigned half = (unsigned)vlenb / 2;
        for (unsigned p = 0; p < vlenb / (2 * chunk); p++) {
            memcpy(out + p * chunk, a + 2 * p * chunk, chunk);
            memcpy(out + vlenb + p * chunk, a + 2 * p * chunk + chunk, chunk);
            memcpy(out + half + p * chunk, b + 2 * p * chunk, chunk);
            memcpy(out + vlenb + half + p * chunk, b + 2 * p * chunk + chunk, chunk);
        }
    }
    memcpy(file + d->vd * vlenb, out, 2 * vlenb);
}

/* The layout instructions' pack_len in bytes: SEW (vtype's vsew) for imm2 0, else 128, 256 or 512 bits. */
static unsigned chunk_bytes(const madot_t *d, uint64_t vtype) {
    return d->imm2 ? 8u << d->imm2 : 1u << ((vtype >> 3) & 7);
}

/* The illegal cases stay illegal: a shape other than A60's or A100's (the floating-point and layout forms:
 * A100's only), LMUL other than 1 (or vill), an odd vd; for the matrix products a destination pair
 * overlapping a source, for the layout instructions a pack_len past VLEN. */
static int legal(const madot_t *d, uint64_t vlenb, uint64_t vtype) {
    if ((vlenb != 32 && vlenb != 128) || ((d->fp16 || d->layout) && vlenb != 128) || (vtype >> 63) ||
        (vtype & 7) != 0 || (d->vd & 1))
        return 0;
    if (d->layout) return chunk_bytes(d, vtype) <= vlenb;
    return !(overlaps(d->vd, 2, d->vs1) || overlaps(d->vd, 2, d->vs2) ||
             (d->slide && overlaps(d->vd, 2, d->vs1 + 1)));
}

int spine_matrix_emulate(void *context) {
    ucontext_t *uc = context;
    uintptr_t pc = (uintptr_t)uc->uc_mcontext.__gregs[REG_PC];
    uint32_t insn;
    madot_t d;
    if (!enabled) return 0;
    memcpy(&insn, (const void *)pc, 4);
    if (!decode(insn, &d)) return 0;
    uint64_t vlenb = read_vlenb(), vtype = read_vtype();
    if (!legal(&d, vlenb, vtype)) return 0;
    store_registers(registers, 8 * vlenb);
    if (d.layout)
        layout_transform(registers, vlenb, &d, chunk_bytes(&d, vtype));
    else if (d.fp16)
        float_multiply_accumulate(registers, vlenb, &d);
    else
        multiply_accumulate(registers, vlenb, &d);
    load_registers(registers, 8 * vlenb);
    uc->uc_mcontext.__gregs[REG_PC] = pc + 4;
    atomic_fetch_add_explicit(&emulated, 1, memory_order_relaxed);
    return 1;
}

unsigned long spine_matrix_emulated(void) { return atomic_load_explicit(&emulated, memory_order_relaxed); }

static void on_sigill(int sig, siginfo_t *info, void *context) {
    if (info->si_code > 0 && spine_matrix_emulate(context)) return;
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigaction(sig, &dfl, NULL);   /* returning re-executes the instruction: the default action ends us */
}

void spine_matrix_emulation_install(void) {
    if (!spine_matrix_emulation_enable()) return;
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = on_sigill;
    action.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&action.sa_mask);
    sigaction(SIGILL, &action, NULL);
}

#else
int spine_matrix_emulation_enable(void) { return 0; }

int spine_matrix_emulate(void *context) {
    (void)context;
    return 0;
}

void spine_matrix_emulation_install(void) {}

unsigned long spine_matrix_emulated(void) { return 0; }
#endif
