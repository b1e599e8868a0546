/* Runs one SpacemiT matrix instruction on registers read from stdin, under Spine's emulation
 * (cpp/matrix_emulation.c), and writes the destination pair to stdout: the guest half of
 * test_matrix_emulation.py. Input: the instruction's index in RUN below (one byte), then A (the pair vs1,
 * vs1+1: 2 * vlenb bytes), B (vlenb bytes) and C (the pair vd, vd+1: 2 * vlenb bytes). */
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#include "matrix_emulation.h"

/* One instruction `line` (it names v16, v0 and v2) under the vtype `vtype`, on A in the pair v0, v1, B in v2
 * and C in the pair v16, v17. */
#define RUN_LINE(vtype, line) __asm__ volatile(                                                       \
    "vsetvli t0, zero, e8, m1\n vle8.v v0, (%0)\n vle8.v v1, (%1)\n vle8.v v2, (%2)\n"              \
    "vsetvli t0, zero, e32, m2\n vle32.v v16, (%3)\n vsetvli t0, zero, " vtype "\n"                  \
    line                                                                                            \
    "vsetvli t0, zero, e32, m2\n vse32.v v16, (%3)\n"                                                \
    :: "r"(a), "r"(a + vlenb), "r"(b), "r"(c) : "t0", "v0", "v1", "v2", "v16", "v17", "memory")
/* the integer forms by their LLVM mnemonics, at LMUL `lmul` */
#define RUN_AT(lmul, insn) RUN_LINE("e8, " lmul, insn " v16, v0, v2\n")
#define RUN(insn) RUN_AT("m1", insn)
/* smt.vfwmadot* (A100, not in LLVM 22) by its encoding: funct7 1001111, funct3 100 + slide; on fp16 */
#define VFWMADOT(funct3) ".insn r 0x2b, " #funct3 ", 0x4f, v16, v0, v2\n"
/* the layout instructions, under SEW `sew` (LMUL 1) */
#define RUN_SEW(sew, line) RUN_LINE(sew ", m1", line)

static int read_all(void *p, size_t n) {
    for (size_t got = 0; got < n;) {
        ssize_t r = read(0, (char *)p + got, n - got);
        if (r <= 0) return 0;
        got += (size_t)r;
    }
    return 1;
}

int main(void) {
    static uint8_t a[256], b[128], c[256];
    uint8_t which;
    size_t vlenb;
    __asm__ volatile("csrr %0, vlenb" : "=r"(vlenb));
    spine_matrix_emulation_install();
    if (!read_all(&which, 1) || !read_all(a, 2 * vlenb) || !read_all(b, vlenb) || !read_all(c, 2 * vlenb))
        return 2;
    switch (which) {
    case 0: RUN("smt.vmadot"); break;
    case 1: RUN("smt.vmadotu"); break;
    case 2: RUN("smt.vmadotsu"); break;
    case 3: RUN("smt.vmadotus"); break;
    case 4: RUN("smt.vmadot1"); break;
    case 5: RUN("smt.vmadot2"); break;
    case 6: RUN("smt.vmadot3"); break;
    case 7: RUN("smt.vmadot1u"); break;
    case 8: RUN("smt.vmadot2su"); break;
    case 9: RUN("smt.vmadot3us"); break;
    case 10: RUN_AT("m2", "smt.vmadot"); break;   /* LMUL 2: illegal, so never emulated */
    case 11: RUN_SEW("e16", VFWMADOT(4)); break;
    case 12: RUN_SEW("e16", VFWMADOT(5)); break;
    case 13: RUN_SEW("e16", VFWMADOT(6)); break;
    case 14: RUN_SEW("e16", VFWMADOT(7)); break;
    case 15: RUN_SEW("e32", ".insn r 0x2b, 1, 0x33, v16, v0, v2\n"); break;   /* vpack.vv 128-bit chunks */
    case 16: RUN_SEW("e32", ".insn r 0x2b, 5, 0x33, v16, v0, v2\n"); break;   /* vupack.vv 128-bit chunks */
    case 17: RUN_SEW("e16", ".insn r 0x2b, 0, 0x33, v16, v0, v2\n"); break;   /* vpack.vv SEW chunks */
    case 18: RUN_SEW("e32", ".insn r 0x2b, 7, 0x33, v16, v0, v2\n"); break;   /* vupack.vv 512-bit chunks */
    default: return 2;
    }
    return fwrite(c, 1, 2 * vlenb, stdout) == 2 * vlenb ? 0 : 1;
}
