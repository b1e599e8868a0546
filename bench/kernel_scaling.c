/* Multi-core scaling of real Spine kernels, driven by the C grid runtime alone: no Python, no Spine
 * package on the machine that runs it. bench/kernel_scaling.py compiles the kernels into .so files and
 * writes one manifest line per kernel:
 *
 *   <name> <file.so> <gx> <gy> <gz> <args...>     where an arg is  b<bytes>  (a buffer of fp32 values in
 *                                                 [0, 1)), h<bytes> (fp16 values in [0.5, 1)), z<bytes>
 *                                                 (zeros: locks, counters), i<value> (an int32 scalar)
 *                                                 or f<value> (an fp32 scalar)
 *
 *   cc -O2 bench/kernel_scaling.c cpp/grid.c cpp/fault_guard.c cpp/device_io.c cpp/profile_buffers.c \
 *      cpp/openmp_team.c -Icpp -rdynamic -ldl -lpthread -lm -o kernel_scaling && ./kernel_scaling manifest.txt 16
 *
 * Prints, per kernel, the best of several launches on 1, 2, 4, ... threads and the speed-up (with `only`,
 * on max_threads alone); with `check`, whether each matrix product's result is exact (check_product). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "grid.h"

#define MAX_ARGS 32

typedef struct {
    char name[128];
    spine_entry_fn entry;
    int32_t grid[3];
    int n_args;
    uint64_t slots[MAX_ARGS];
    void *args[MAX_ARGS];
} kernel_t;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* Buffers hold small positive floats (as float32 or as raw bytes for other types): no NaNs or overflow
 * that would change the kernels' speed. */
/* kind 'b': fp32 values in [0, 1); 'h': fp16 values in [0.5, 1) (fp32's halves would hold NaNs and
 * subnormals); 'z': zeros. */
static void *make_buffer(char kind, size_t bytes) {
    void *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!p) { perror("aligned_alloc"); exit(1); }
    memset(p, 0, bytes);
    for (size_t i = 0; kind == 'b' && i < bytes / 4; i++) ((float *)p)[i] = (float)((i * 2654435761u) % 1000) / 1000.0f;
    /* 0x3800 + x: 0.5 .. 1 in fp16 steps (exponent -1, mantissa x < 1024) */
    for (size_t i = 0; kind == 'h' && i < bytes / 2; i++) ((uint16_t *)p)[i] = (uint16_t)(0x3800 + (i * 2654435761u) % 1024);
    return p;
}

static int parse(char *line, const char *dir, kernel_t *k) {
    char *save = NULL, *tok = strtok_r(line, " \t\n", &save);
    if (!tok) return 0;
    snprintf(k->name, sizeof k->name, "%s", tok);
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, strtok_r(NULL, " \t\n", &save));
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) { fprintf(stderr, "%s\n", dlerror()); exit(1); }
    k->entry = (spine_entry_fn)dlsym(lib, "spine_entry");
    for (int d = 0; d < 3; d++) k->grid[d] = atoi(strtok_r(NULL, " \t\n", &save));
    k->n_args = 0;
    while ((tok = strtok_r(NULL, " \t\n", &save)) && k->n_args < MAX_ARGS) {
        int i = k->n_args++;
        if (strchr("bhz", tok[0])) k->slots[i] = (uint64_t)(uintptr_t)make_buffer(tok[0], strtoull(tok + 1, NULL, 10));
        else if (tok[0] == 'f') { float v = strtof(tok + 1, NULL); k->slots[i] = 0; memcpy(&k->slots[i], &v, 4); }
        else k->slots[i] = (uint64_t)(uint32_t)atoi(tok + 1);
        k->args[i] = &k->slots[i];
    }
    return 1;
}

static double best_time(kernel_t *k, int threads, int reps) {
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double start = now();
        int rc = spine_run_grid(k->entry, k->args, k->grid[0], k->grid[1], k->grid[2], threads);
        double dt = now() - start;
        if (rc) { fprintf(stderr, "%s: launch failed (%d)\n", k->name, rc); exit(1); }
        if (dt < best) best = dt;
    }
    return best;
}

/* A value of A or B at flat index i: small integers, exact in every type, and so are fp32 sums of their
 * products (below 2^24). */
static int operand_value(int64_t i, int which) { return (int)((i * (which ? 40503u : 2654435761u)) >> 7 & 15) - 8; }

/* A @ B of those values for n x n matrices, computed once per n. */
static int32_t *reference(int64_t n) {
    static int64_t cached_n;
    static int32_t *cached;
    if (cached_n == n) return cached;
    free(cached);
    int32_t *a = malloc(n * n * 4), *bt = malloc(n * n * 4), *c = malloc(n * n * 4);
    for (int64_t r = 0; r < n; r++)
        for (int64_t q = 0; q < n; q++) {
            a[r * n + q] = operand_value(r * n + q, 0);
            bt[q * n + r] = operand_value(r * n + q, 1);
        }
    for (int64_t r = 0; r < n; r++)
        for (int64_t col = 0; col < n; col++) {
            int32_t sum = 0;
            for (int64_t q = 0; q < n; q++) sum += a[r * n + q] * bt[col * n + q];
            c[r * n + col] = sum;
        }
    free(a);
    free(bt);
    cached_n = n;
    cached = c;
    return c;
}

/* A and B of a square product of n * n = count elements of `elem` bytes: operand_value from i + shift. */
static void fill_operands(kernel_t *k, int64_t count, int elem, int64_t shift) {
    for (int which = 0; which < 2; which++) {
        char *p = (char *)(uintptr_t)k->slots[which];
        for (int64_t i = 0; i < count; i++) {
            int v = operand_value(i + shift, which);
            float f = (float)v;
            uint32_t bits;
            memcpy(&bits, &f, 4);
            if (elem == 1) ((int8_t *)p)[i] = (int8_t)v;
            else if (elem == 2) ((uint16_t *)p)[i] = (uint16_t)(bits >> 16);     /* exact: a small integer */
            else ((float *)p)[i] = f;
        }
    }
}

/* "check": a matrix product of bench/kernel_scaling.py --matmul's manifest (args A, B, C and then integers,
 * A and B square) computed on small integers and compared with a plain triple loop, exactly; the number of
 * elements that differ, or -1 for a kernel that is not such a product or a launch that failed. For the
 * matrix units of a machine Spine itself cannot run on (AMX on a lent Xeon). */
static int64_t check_product(kernel_t *k, int threads) {
    char kind[16];
    int size;
    if (sscanf(k->name, "matmul_%15[a-z0-9]_%d^3", kind, &size) != 2) return -1;
    int64_t n = size, count = n * n;
    int elem = strcmp(kind, "int8") == 0 ? 1 : strcmp(kind, "bf16") == 0 ? 2 : 4;
    void *out = (void *)(uintptr_t)k->slots[2];
    /* A launch on other values first, into the same buffers: what a launch keeps (packed panels,
     * cpp/shared_panels.h) must not reach the next one. */
    fill_operands(k, count, elem, 7);
    if (spine_run_grid(k->entry, k->args, k->grid[0], k->grid[1], k->grid[2], threads)) return -1;
    fill_operands(k, count, elem, 0);
    memset(out, 0, (size_t)count * 4);
    if (spine_run_grid(k->entry, k->args, k->grid[0], k->grid[1], k->grid[2], threads)) return -1;
    const int32_t *expected = reference(n);
    int64_t wrong = 0;
    for (int64_t i = 0; i < count; i++)
        wrong += (elem == 1 ? (double)((int32_t *)out)[i] : (double)((float *)out)[i]) != (double)expected[i];
    return wrong;
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: %s manifest.txt [max_threads [only | check]]\n", argv[0]); return 2; }
    int max_threads = argc > 2 ? atoi(argv[2]) : spine_num_cores();
    /* "only": max_threads alone, not the sweep from one thread up (bench/torch_matmul.py --spine) */
    int only = argc > 3 && strcmp(argv[3], "only") == 0;
    int check = argc > 3 && strcmp(argv[3], "check") == 0;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", argv[1]);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0; else strcpy(dir, ".");
    /* Kernels call libm without naming it (Python has it loaded when Spine runs them in-process). */
    if (!dlopen("libm.so.6", RTLD_NOW | RTLD_GLOBAL)) { fprintf(stderr, "%s\n", dlerror()); return 1; }
    FILE *f = fopen(argv[1], "r");
    if (!f) { perror(argv[1]); return 1; }
    printf("cores=%d\n| kernel | threads | ms | speed-up | efficiency |\n|---|---|---|---|---|\n", spine_num_cores());
    char line[8192];
    kernel_t k;
    while (fgets(line, sizeof line, f)) {
        if (!parse(line, dir, &k)) continue;
        if (check) {
            int64_t wrong = check_product(&k, max_threads);
            if (wrong < 0) printf("| %s | %d | not a product, or its launch failed |\n", k.name, max_threads);
            else if (wrong) printf("| %s | %d | WRONG: %lld elements differ |\n", k.name, max_threads, (long long)wrong);
            else printf("| %s | %d | exact |\n", k.name, max_threads);
            fflush(stdout);
            continue;
        }
        best_time(&k, max_threads, 2);  /* warm the pool, the pages and the caches */
        double base = 0;
        for (int t = only ? max_threads : 1; t <= max_threads; t *= 2) {
            double dt = best_time(&k, t, 5);
            if (base == 0) base = dt;
            printf("| %s | %d | %.3f | %.2f | %.0f%% |\n", k.name, t, dt * 1e3, base / dt, 100.0 * base / dt / t);
            fflush(stdout);
            if (t * 2 > max_threads && t != max_threads) t = max_threads / 2;
        }
    }
    return 0;
}
