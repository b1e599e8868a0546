/* Device print and assert for kernels. Lines are printed whole under a lock so that program instances
 * running on several threads do not interleave characters; a failed assertion or bounds check is
 * recorded (the first one wins) and reported by the launcher after the grid finished, as GPUs report
 * device asserts.
 *
 * A launch being stopped (fault_guard.h) never stops a thread in here, where it may hold our lock or
 * stdio's: the stop waits for the safe point after the lock is released. */
#include "device_io.h"
#include "fault_guard.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static pthread_mutex_t print_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t assert_lock = PTHREAD_MUTEX_INITIALIZER;
static int assert_failed;
static char assert_message[1024];

static void print_head(int64_t prefix, int32_t px, int32_t py, int32_t pz, int64_t index, int32_t operand) {
    /* triton's prefix starts with a space and ends with ": " */
    printf("pid (%d, %d, %d)", px, py, pz);
    if (index >= 0) printf(" idx (%" PRId64 ")", index);
    printf("%s", (const char *)(intptr_t)prefix);
    if (operand >= 0) printf("(operand %d) ", operand);
}

void spine_print_f64(int64_t prefix, int32_t px, int32_t py, int32_t pz, int64_t index, int32_t operand,
                     double value) {
    pthread_mutex_lock(&print_lock);
    print_head(prefix, px, py, pz, index, operand);
    printf("%f\n", value);
    fflush(stdout);
    pthread_mutex_unlock(&print_lock);
    spine_fault_guard_safe_point();
}

void spine_print_i64(int64_t prefix, int32_t px, int32_t py, int32_t pz, int64_t index, int32_t operand,
                     int64_t value, int32_t is_signed, int32_t hex) {
    pthread_mutex_lock(&print_lock);
    print_head(prefix, px, py, pz, index, operand);
    if (hex) printf("0x%" PRIx64 "\n", (uint64_t)value);
    else if (is_signed) printf("%" PRId64 "\n", value);
    else printf("%" PRIu64 "\n", (uint64_t)value);
    fflush(stdout);
    pthread_mutex_unlock(&print_lock);
    spine_fault_guard_safe_point();
}

static void record_failure(const char *format, ...) {
    pthread_mutex_lock(&assert_lock);
    if (!assert_failed) {
        assert_failed = 1;
        va_list args;
        va_start(args, format);
        vsnprintf(assert_message, sizeof assert_message, format, args);
        va_end(args);
    }
    pthread_mutex_unlock(&assert_lock);
    spine_fault_guard_safe_point();
}

void spine_assert_fail(int64_t message, int32_t px, int32_t py, int32_t pz, int64_t index) {
    record_failure("%s (pid (%d, %d, %d), idx (%" PRId64 "))", (const char *)(intptr_t)message, px, py, pz,
                   index);
}

void spine_bounds_fail(int64_t message, int32_t px, int32_t py, int32_t pz, int64_t offset, int64_t extent) {
    record_failure("%s: element offset %" PRId64 " is outside [0, %" PRId64 "), the argument's extent in "
                   "elements (pid (%d, %d, %d))", (const char *)(intptr_t)message, offset, extent, px, py, pz);
}

int spine_take_assert_failure(char *buffer, size_t size) {
    pthread_mutex_lock(&assert_lock);
    int failed = assert_failed;
    if (failed && size) {
        strncpy(buffer, assert_message, size - 1);
        buffer[size - 1] = 0;
    }
    assert_failed = 0;
    pthread_mutex_unlock(&assert_lock);
    return failed;
}

int spine_assert_pending(void) {
    pthread_mutex_lock(&assert_lock);
    int failed = assert_failed;
    pthread_mutex_unlock(&assert_lock);
    return failed;
}
