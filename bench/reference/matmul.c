/* Hand-written reference for the matmul benchmark (see vector_add.c for the ABI): C = A @ B, fp32,
 * row-major n x n, one program per 32 x 32 tile of C, i-k-j loop order so the inner loop vectorises.
 * args: a, b, c (pointers), n (i32). */
#include <stdint.h>

#define TILE 32

void spine_entry(void **args, int32_t px, int32_t py, int32_t pz, int32_t nx, int32_t ny, int32_t nz) {
    (void)pz; (void)nx; (void)ny; (void)nz;
    const float *restrict a = *(const float **)args[0];
    const float *restrict b = *(const float **)args[1];
    float *restrict c = *(float **)args[2];
    int32_t n = *(int32_t *)args[3];
    float acc[TILE][TILE] = {{0}};
    int32_t i0 = px * TILE, j0 = py * TILE;
    for (int32_t k = 0; k < n; k++)
        for (int32_t i = 0; i < TILE; i++) {
            float aik = a[(int64_t)(i0 + i) * n + k];
            for (int32_t j = 0; j < TILE; j++) acc[i][j] += aik * b[(int64_t)k * n + j0 + j];
        }
    for (int32_t i = 0; i < TILE; i++)
        for (int32_t j = 0; j < TILE; j++) c[(int64_t)(i0 + i) * n + j0 + j] = acc[i][j];
}
