/* Hand-written reference for the vector-add benchmark: plain C that clang auto-vectorises for RVV, built
 * as a kernel .so with Spine's entry point ABI so the same QEMU server runs it and the same instruction
 * counter measures it. args: x, y, out (pointers), n (i32); one program per BLOCK elements. */
#include <stdint.h>

#define BLOCK 4096

void spine_entry(void **args, int32_t px, int32_t py, int32_t pz, int32_t nx, int32_t ny, int32_t nz) {
    (void)py; (void)pz; (void)nx; (void)ny; (void)nz;
    const float *restrict x = *(const float **)args[0];
    const float *restrict y = *(const float **)args[1];
    float *restrict out = *(float **)args[2];
    int32_t n = *(int32_t *)args[3];
    int64_t start = (int64_t)px * BLOCK, end = start + BLOCK < n ? start + BLOCK : n;
    for (int64_t i = start; i < end; i++) out[i] = x[i] + y[i];
}
