/* In-process runtime for the host target, called from Python through ctypes (which drops the GIL for
 * the call, so the pool's threads run freely). Loaded with RTLD_GLOBAL: kernels bind to the device
 * print/assert functions of device_io.c in it. */
#include "device_io.h"
#include "grid.h"
#include "openmp_team.h"

#ifdef __GLIBC__
#include <malloc.h>
#endif

/* The timeout comes with every launch, from the settings the caller read for it (spine/driver/settings.py):
 * then no launch can run under a timeout some other launch path left behind. */
int spine_host_run_grid(void *entry, void **args, int32_t gx, int32_t gy, int32_t gz, int32_t num_threads,
                        int64_t timeout_ns) {
    spine_grid_set_timeout_ns(timeout_ns);
    return spine_run_grid((spine_entry_fn)entry, args, gx, gy, gz, num_threads);
}

int spine_host_num_cores(void) { return spine_num_cores(); }

/* One launch of a replayed launch graph (spine/driver/graph.py): what spine_host_run_grid takes. */
typedef struct {
    void *entry;
    void **args;
    int32_t gx, gy, gz;
    int32_t threads;    /* 0: the replay's */
} spine_graph_launch_t;

/* Runs launches[0 .. n) in order, one call for a whole graph where Python would make two a launch (the
 * launch, then the check for a pending assertion failure). Returns n when every launch ran clean, else the
 * index of the first that did not: its spine_run_grid code in *rc (0: it left an assertion failure). */
int spine_host_run_graph(const spine_graph_launch_t *launches, int32_t n, int32_t threads, int64_t timeout_ns,
                         int *rc) {
    spine_grid_set_timeout_ns(timeout_ns);
    for (int32_t i = 0; i < n; i++) {
        const spine_graph_launch_t *l = &launches[i];
        int code = spine_run_grid((spine_entry_fn)l->entry, l->args, l->gx, l->gy, l->gz,
                                  l->threads ? l->threads : threads);
        if (code || spine_assert_pending()) {
            *rc = code;
            return i;
        }
    }
    return n;
}

/* Kernels run inside the user's Python process: a fault in one must become an exception, not a crash. */
__attribute__((constructor)) static void guard_kernels(void) { spine_grid_guard_faults(1); }

/* ... and share the process's OpenMP threads (PyTorch's) when it has them (openmp_team.h says why);
 * SPINE_GRID_OPENMP=0 turns that off (spine/driver/native.py). */
__attribute__((constructor)) static void share_openmp(void) { spine_openmp_share(1); }

/* Kernels allocate buffers of a few MiB per program (packed panels, products). glibc gives blocks that
 * large back to the system when they are freed (mmap above its threshold, or trimming the heap's top), so
 * every program would fault their pages in again, one fault per 4 KiB (about 2.5 us each in a VM); keep
 * them mapped in the heap instead. */
#ifdef __GLIBC__
__attribute__((constructor)) static void keep_buffers_mapped(void) {
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
}
#endif
