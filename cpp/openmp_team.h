/* The OpenMP runtime already in the process (PyTorch's libgomp, which libtorch loads), as a team of threads
 * a grid can run on instead of the grid's own pool.
 *
 * Why: after each of its parallel regions an OpenMP runtime keeps its threads polling for the next one
 * (libgomp's default, for milliseconds). A launch on the grid's own threads right after a torch operation
 * then has more threads than cores for that time, and a grid thread that loses its core holds its chunk
 * of programs (or a lock the kernel's programs take) while the others wait: on 2 cores the launch took
 * longer than on one thread. Running the launch on the OpenMP runtime's own team uses the very threads
 * that poll, as C code compiled with -fopenmp and linked against the same libgomp would. */
#ifndef SPINE_OPENMP_TEAM_H
#define SPINE_OPENMP_TEAM_H

typedef struct {
    /* GOMP_parallel: fn(data) on a team of `threads` (the caller is member 0); returns once all are done */
    void (*parallel)(void (*fn)(void *), void *data, unsigned threads, unsigned flags);
    int (*thread_num)(void);     /* omp_get_thread_num: the calling member's index */
} spine_openmp_t;

/* The OpenMP runtime the process has loaded, or NULL: none (looked for again every 256 calls while there
 * is none, so a torch imported later is found), sharing is off, or this is a child forked from a process
 * whose runtime may have had threads (which the child does not have: libgomp would wait for them). Not
 * thread-safe: the grid calls it under its pool lock. */
const spine_openmp_t *spine_openmp_loaded(void);

/* Whether to look for one at all (the host runtime turns this on; the QEMU kernel server leaves it off). */
void spine_openmp_share(int on);

/* Whether the calling thread's stack is at least as large as a launching thread's (RLIMIT_STACK's soft
 * limit; 8 MiB when unlimited): a team member with less does not take programs, since kernels keep tiles
 * on the stack and must not fault on one thread where they run on another. */
int spine_openmp_stack_is_roomy(void);

#endif
