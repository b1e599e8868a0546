/* Calls the ahead-of-time softmax kernel from plain C (see README.md here): a rows x cols matrix of
 * small exact values, one program per row, every output printed on its own line. */
#include <stdio.h>
#include <stdlib.h>

#include "softmax.h"

/* Exactly representable, so any other program can rebuild the same input. */
static float input_value(int row, int col) { return (float)((row * 31 + col * 17) % 23) * 0.25f - 2.0f; }

int main(int argc, char **argv) {
    int rows = argc > 1 ? atoi(argv[1]) : 4, cols = argc > 2 ? atoi(argv[2]) : 100;
    if (rows <= 0 || cols <= 0 || cols > 128) {
        fprintf(stderr, "usage: %s [rows] [cols <= 128 (the kernel's BLOCK)]\n", argv[0]);
        return 2;
    }
    float *x = malloc(sizeof(float) * rows * cols), *y = malloc(sizeof(float) * rows * cols);
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) x[r * cols + c] = input_value(r, c);
    int rc = softmax(y, x, cols, cols, cols, rows, 1, 1);
    if (rc != SPINE_AOT_OK) {
        fprintf(stderr, "softmax failed: %d %s\n", rc, softmax_last_error());
        return 1;
    }
    for (int i = 0; i < rows * cols; i++) printf("%.9g\n", y[i]);
    free(x);
    free(y);
    return 0;
}
