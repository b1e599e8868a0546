/* The host's fp32 FMA roof on one thread: 16 independent chains of vector FMAs (no loads), the widest
 * vectors the compiler is told of (-march=native): zmm with AVX-512F, else ymm with AVX2 + FMA.
 * Prints GFLOP/s, the best of 5 runs in process CPU time. Used by bench/smt_matmul.py. */
#include <stdio.h>
#include <time.h>

static double cpu_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

#if defined(__AVX512F__)
#define REG(n) "%%zmm" #n
#define LANES 16
#define CLOBBERS "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", \
                 "xmm13", "xmm14", "xmm15", "xmm16", "xmm17"
#define ACCS 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17
#elif defined(__AVX2__) && defined(__FMA__)
#define REG(n) "%%ymm" #n
#define LANES 8
#define CLOBBERS "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", \
                 "xmm13", "xmm14", "xmm15"
#else
#error "needs AVX-512F or AVX2 + FMA"
#endif
#define FMA(n) "vfmadd231ps " REG(0) ", " REG(1) ", " REG(n) "\n"

int main(void) {
    const long iterations = 50000000;
    double best = 1e30;
    for (int run = 0; run < 5; run++) {
        long i = iterations;
        double start = cpu_seconds();
        __asm__ volatile(
            "vxorps %%xmm0, %%xmm0, %%xmm0\n vxorps %%xmm1, %%xmm1, %%xmm1\n"
            "1:\n"
            FMA(2) FMA(3) FMA(4) FMA(5) FMA(6) FMA(7) FMA(8) FMA(9)
            FMA(10) FMA(11) FMA(12) FMA(13) FMA(14) FMA(15)
#if LANES == 16
            FMA(16) FMA(17)
#else
            FMA(2) FMA(3)
#endif
            "dec %0\n jnz 1b\n"
            : "+r"(i) : : "xmm0", "xmm1", CLOBBERS, "cc");
        double seconds = cpu_seconds() - start;
        if (seconds < best) best = seconds;
    }
    printf("%.1f\n", iterations * 16.0 * LANES * 2 / best / 1e9);
    return 0;
}
