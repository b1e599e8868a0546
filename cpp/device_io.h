/* What kernels call for tl.device_print, tl.device_assert and bounds checks (debug=True). Exported by
 * the host runtime library and by the QEMU kernel server, and resolved when a kernel .so is loaded. */
#ifndef SPINE_DEVICE_IO_H
#define SPINE_DEVICE_IO_H
#include <stddef.h>
#include <stdint.h>

void spine_print_f64(int64_t prefix, int32_t px, int32_t py, int32_t pz, int64_t index, int32_t operand,
                     double value);
void spine_print_i64(int64_t prefix, int32_t px, int32_t py, int32_t pz, int64_t index, int32_t operand,
                     int64_t value, int32_t is_signed, int32_t hex);
void spine_assert_fail(int64_t message, int32_t px, int32_t py, int32_t pz, int64_t index);
/* A load, store or atomic of a bounds-checked kernel (debug) would reach element `offset` of an argument
 * whose extent is `extent` elements; `message` names the access, the argument, the kernel and the line. */
void spine_bounds_fail(int64_t message, int32_t px, int32_t py, int32_t pz, int64_t offset, int64_t extent);

/* 1 and the first failure's text if an assertion or a bounds check failed since the last call (which
 * clears it), else 0. */
int spine_take_assert_failure(char *buffer, size_t size);

/* Whether a failure is waiting for spine_take_assert_failure, leaving it there. */
int spine_assert_pending(void);

#endif
