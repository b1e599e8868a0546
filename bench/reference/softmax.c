/* Hand-written reference for the row softmax benchmark: plain C that clang auto-vectorises for RVV, built
 * as a kernel .so with Spine's entry point ABI so the same QEMU server runs it and the same instruction
 * counter measures it. args: out, in (pointers), in_row_stride, out_row_stride, n_cols (i32); one program
 * per row. Three passes over the row: max; exp(x - max) stored and summed; scaled by 1/sum.
 *
 * exp is inline so that the loop vectorises (a C library expf call would keep it scalar): x = k ln2 + r,
 * |r| <= ln2/2, a degree-6 polynomial in r, times 2^k from the exponent bits (the arguments here are
 * <= 0, so only underflow needs a guard). */
#include <stdint.h>

static inline float exp_nonpositive(float x) {
    x = x < -87.0f ? -87.0f : x;
    float k = __builtin_floorf(x * 1.44269504f + 0.5f);
    float r = x - k * 0.693359375f;
    r = r + k * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    float y = p * r * r + r + 1.0f;
    int32_t bits = ((int32_t)k + 127) << 23;
    return y * __builtin_bit_cast(float, bits);
}

void spine_entry(void **args, int32_t px, int32_t py, int32_t pz, int32_t nx, int32_t ny, int32_t nz) {
    (void)py; (void)pz; (void)nx; (void)ny; (void)nz;
    float *restrict out = *(float **)args[0];
    const float *restrict in = *(const float **)args[1];
    int32_t in_stride = *(int32_t *)args[2], out_stride = *(int32_t *)args[3], n = *(int32_t *)args[4];
    const float *restrict row = in + (int64_t)px * in_stride;
    float *restrict dst = out + (int64_t)px * out_stride;
    {
#pragma clang fp reassociate(on)
        float m = row[0];
        for (int32_t i = 1; i < n; i++) m = __builtin_fmaxf(m, row[i]);
        float sum = 0.0f;
        for (int32_t i = 0; i < n; i++) {
            float e = exp_nonpositive(row[i] - m);
            dst[i] = e;
            sum += e;
        }
        float scale = 1.0f / sum;
        for (int32_t i = 0; i < n; i++) dst[i] *= scale;
    }
}
