/* Hand-written reference for the transpose benchmark (see vector_add.c for the ABI): out = in^T for a
 * row-major m x m fp32 matrix, one program per 32 x 32 tile. args: in, out (pointers), m (i32). */
#include <stdint.h>

#define TILE 32

void spine_entry(void **args, int32_t px, int32_t py, int32_t pz, int32_t nx, int32_t ny, int32_t nz) {
    (void)pz; (void)nx; (void)ny; (void)nz;
    const float *restrict in = *(const float **)args[0];
    float *restrict out = *(float **)args[1];
    int32_t m = *(int32_t *)args[2];
    for (int32_t i = px * TILE; i < px * TILE + TILE; i++)
        for (int32_t j = py * TILE; j < py * TILE + TILE; j++) out[(int64_t)j * m + i] = in[(int64_t)i * m + j];
}
