/* Proton on the CPU: the records kernels and the grid write while a launch is profiled.
 *
 * A kernel compiled with proton scopes (triton.profiler.language.enter_scope/exit_scope) calls
 * spine_proton_record at each scope boundary. Every thread appends to a buffer of its own (no lock, no
 * atomic on that path): a start opens a record and pushes it on the thread's scope stack, an end closes
 * the record on top. A profiled launch (spine_profile_run_grid) also records each program instance, so
 * scopes nest inside the program that ran them, and returns everything the launch recorded as one block.
 *
 * Time is read from the best counter the target has (spine_profile_counter_name says which):
 *   x86-64   rdtsc: the invariant time-stamp counter, wall time at a constant rate (not core cycles)
 *   riscv64  rdtime: the platform timer, wall time at the timebase frequency (not core cycles; Linux
 *            denies user-mode rdcycle by default). Under QEMU user mode rdtime returns the host's
 *            clock: host time, not RISC-V timer ticks.
 *   aarch64  cntvct_el0: the generic timer's virtual count
 *   other    clock_gettime(CLOCK_MONOTONIC) in nanoseconds
 * spine_profile_calibrate measures the counter's frequency against CLOCK_MONOTONIC. */
#ifndef SPINE_PROFILE_BUFFERS_H
#define SPINE_PROFILE_BUFFERS_H
#include <stddef.h>
#include <stdint.h>

#include "grid.h"

/* One interval on one thread: a scope a kernel marked, or (name 0) a whole program instance. */
typedef struct {
    uint64_t start, end;   /* counter ticks */
    uint64_t name;         /* in a thread's buffer: the address of the scope's NUL-terminated name;
                              in a collected block: its index in the block's name table (0: a program) */
    int32_t pid[3];
    uint16_t thread;       /* the grid thread that ran it (spine_grid_thread_index) */
    uint16_t depth;        /* nesting on its thread: programs 0, their outermost scopes 1, ... */
} spine_profile_record_t;

#define SPINE_PROFILE_MAGIC 0x52505053u /* "SPPR" */
#define SPINE_PROFILE_VERSION 1u

/* A collected block: this header, `records` records, then `names` NUL-terminated names (the first is
 * the empty name of program records), `names_bytes` bytes in all. */
typedef struct {
    uint32_t magic, version;
    uint32_t records, names;
    uint32_t names_bytes, threads;   /* threads: how many grid threads the launch used */
    uint64_t launch_start, launch_end;
    uint64_t dropped;                /* records lost: a buffer could not grow, or scopes nested too deep */
    uint64_t unmatched;              /* ends without a matching start, and starts never ended */
} spine_profile_header_t;

/* Called by instrumented kernels: `name` is the address of the scope's name, is_start 1 at
 * enter_scope and 0 at exit_scope, then the program id. */
void spine_proton_record(int64_t name, int32_t is_start, int32_t px, int32_t py, int32_t pz);

/* Runs a grid (as spine_run_grid) and collects what it recorded: *block receives a malloc'ed block
 * (free it with spine_profile_free) of *size bytes, or NULL when out of memory. Profiled launches run one
 * at a time. Returns what spine_run_grid returned. */
int spine_profile_run_grid(spine_entry_fn fn, void **args, int32_t gx, int32_t gy, int32_t gz,
                           int32_t num_threads, int32_t record_programs, void **block, uint64_t *size);
void spine_profile_free(void *block);

/* The counter: its current value, its name, and its frequency measured against CLOCK_MONOTONIC over
 * about `milliseconds`; *ticks and *monotonic_ns receive one reading of both taken together. */
uint64_t spine_profile_counter(void);
const char *spine_profile_counter_name(void);
double spine_profile_calibrate(int32_t milliseconds, uint64_t *ticks, int64_t *monotonic_ns);

#endif
