/* In-process runtime for the host target, called from Python through ctypes (which drops the GIL for
 * the call, so the pool's threads run freely). Loaded with RTLD_GLOBAL: kernels bind to the device
 * print/assert functions of device_io.c in it. */
#include "grid.h"

int spine_host_run_grid(void *entry, void **args, int32_t gx, int32_t gy, int32_t gz, int32_t num_threads) {
    return spine_run_grid((spine_entry_fn)entry, args, gx, gy, gz, num_threads);
}

int spine_host_num_cores(void) { return spine_num_cores(); }

/* Kernels run inside the user's Python process: a fault in one must become an exception, not a crash. */
__attribute__((constructor)) static void guard_kernels(void) { spine_grid_guard_faults(1); }
