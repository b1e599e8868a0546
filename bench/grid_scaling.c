/* Multi-core scaling of Spine's grid dispatch (cpp/grid.c), without the compiler: a synthetic kernel with
 * a fixed amount of arithmetic per program instance, run on 1..N threads.
 *
 *   zig cc -O2 bench/grid_scaling.c cpp/grid.c cpp/fault_guard.c cpp/openmp_team.c -Icpp -lpthread -ldl \
 *      -o grid_scaling && ./grid_scaling
 *
 * Prints programs/s per thread count, the speed-up over one thread, and the dispatch cost of a launch
 * whose kernel does nothing. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "grid.h"

static volatile float sink[1 << 16];

static void busy_kernel(void **args, int32_t px, int32_t py, int32_t pz, int32_t nx, int32_t ny, int32_t nz) {
    (void)py; (void)pz; (void)ny; (void)nz; (void)nx;
    int iters = *(int *)args[0];
    float a = (float)px, b = 1.0001f;
    for (int i = 0; i < iters; i++) a = a * b + 0.5f;
    sink[px & 0xffff] = a;
}

static void empty_kernel(void **args, int32_t px, int32_t py, int32_t pz, int32_t nx, int32_t ny, int32_t nz) {
    (void)args; (void)px; (void)py; (void)pz; (void)nx; (void)ny; (void)nz;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    int max_threads = argc > 1 ? atoi(argv[1]) : spine_num_cores();
    int programs = 4096, iters = 200000;
    void *args[1] = {&iters};
    spine_run_grid(busy_kernel, args, 64, 1, 1, max_threads);  /* start the pool */
    double base = 0;
    printf("cores=%d programs=%d iterations/program=%d\n", spine_num_cores(), programs, iters);
    printf("| threads | programs/s | speed-up | efficiency |\n|---|---|---|---|\n");
    for (int t = 1; t <= max_threads; t *= 2) {
        double best = 1e30;
        for (int rep = 0; rep < 3; rep++) {
            double start = now();
            spine_run_grid(busy_kernel, args, programs, 1, 1, t);
            double dt = now() - start;
            if (dt < best) best = dt;
        }
        if (t == 1) base = best;
        printf("| %d | %.0f | %.2f | %.0f%% |\n", t, programs / best, base / best, 100.0 * base / best / t);
        if (t * 2 > max_threads && t != max_threads) t = max_threads / 2;
    }
    for (int t = 1; t <= max_threads; t *= 2) {
        int reps = 20000;
        double start = now();
        for (int i = 0; i < reps; i++) spine_run_grid(empty_kernel, args, 1, 1, 1, t);
        double one = (now() - start) / reps;
        start = now();
        for (int i = 0; i < 2000; i++) spine_run_grid(empty_kernel, args, 4096, 1, 1, t);
        double many = (now() - start) / 2000;
        printf("threads=%d: empty launch of 1 program %.2f us, of 4096 programs %.2f us\n", t, one * 1e6, many * 1e6);
        if (t * 2 > max_threads && t != max_threads) t = max_threads / 2;
    }
    return 0;
}
