/* Grid dispatch: runs every program instance of a launch on a pool of threads.
 *
 * Shared by the in-process host runtime and the QEMU-side kernel server, so both execute a grid the same
 * way. Kernels are called through one uniform entry point that Spine generates for every kernel:
 *   void entry(void **args, int32 pid_x, pid_y, pid_z, num_x, num_y, num_z)
 * where args[i] points at the value of the i-th kernel argument. */
#ifndef SPINE_GRID_H
#define SPINE_GRID_H
#include <stdint.h>

typedef void (*spine_entry_fn)(void **args, int32_t px, int32_t py, int32_t pz,
                               int32_t nx, int32_t ny, int32_t nz);

/* What a launch returns besides 0 and errno values. Under the fault guard: */
#define SPINE_GRID_FAULTED (-1)       /* a program faulted, or the launch was stopped (spine_grid_take_fault) */
#define SPINE_GRID_INTERRUPTED (-2)   /* stopped by Ctrl-C (SIGINT); spine_grid_take_fault describes it */
#define SPINE_GRID_POISONED (-3)      /* refused: an earlier stop may have left locks held */
/* Always: */
#define SPINE_GRID_TOO_LARGE (-4)     /* gx*gy*gz is more program instances than a launch can count (2^62) */

/* Runs the grid gx*gy*gz on up to num_threads threads (0: all cores). Returns 0, an errno value, or one of
 * the codes above. */
int spine_run_grid(spine_entry_fn fn, void **args, int32_t gx, int32_t gy, int32_t gz, int32_t num_threads);

/* Called around each program instance of a launch, on the thread that runs it: how a profiled launch
 * (profile_buffers.h) records programs without the grid knowing about profiles. */
typedef struct {
    void (*begin)(int32_t px, int32_t py, int32_t pz);
    void (*end)(void);
} spine_program_hooks_t;

/* As spine_run_grid; with hooks (NULL: none), each program instance runs between its begin and end. */
int spine_run_grid_ex(spine_entry_fn fn, void **args, int32_t gx, int32_t gy, int32_t gz, int32_t num_threads,
                      const spine_program_hooks_t *hooks);

/* The threads the launch running now was given (its num_threads, or all cores), before a small grid
 * leaves some idle: smt.parallel loops (parallel_loops.c) size their teams by it. All cores outside a
 * launch. */
int spine_grid_launch_threads(void);

/* How long a guarded launch may run before it is stopped, in nanoseconds (0: no limit, the default; a
 * negative value reads as 0). The caller validates and converts the user's setting (spine/switches.py's
 * SPINE_KERNEL_TIMEOUT); it applies from the next launch on. */
void spine_grid_set_timeout_ns(int64_t nanoseconds);

/* The launch running now (or the last one): 1 for a process's first, one more for each after it. What a
 * kernel keeps for the rest of a launch (shared_panels.h) is kept under this number. */
uint64_t spine_grid_launch_number(void);

/* How many consecutive program ids a thread of the launch running now takes at a time: all of them when
 * it runs on one thread, else its chunk (1 when programs are dealt out one by one). */
int64_t spine_grid_run_length(void);

/* Which thread of the grid this is: 0 for the thread that launches, k for the pool's k-th worker. */
int spine_grid_thread_index(void);

/* How many microseconds idle threads poll for the next launch before sleeping (0: sleep at once).
 * Polling pays off natively; under emulation it only takes host cores from the threads doing work. */
void spine_grid_set_spin(int microseconds);

/* Runs kernels under the fault guard (fault_guard.h) from now on: for kernels in the caller's process. */
void spine_grid_guard_faults(int on);

/* 1 and a description of the last launch's fault (which clears it), else 0. */
int spine_grid_take_fault(char *buffer, int size);

/* Number of online cores. */
int spine_num_cores(void);

/* From the next launch on, every grid thread (the launching thread included) runs on the `count` CPUs
 * listed in `cpus` (indices as sched_setaffinity numbers them), and a launch uses at most that many
 * threads: for kernels whose code runs only on some of the machine's cores (core_placement.h). Returns 0,
 * or EINVAL for an empty or out-of-range list. */
int spine_grid_place(const int *cpus, int count);

/* The CPUs grid threads are placed on, into cpus[] (at most `max`); how many (0: not placed). */
int spine_grid_placement(int *cpus, int max);

#endif
