/* Parallel loops of kernels (smt.parallel) and the barriers between their iterations.
 *
 * The compiler turns a kernel's parallel loop into MLIR's OpenMP dialect, whose LLVM translation calls
 * the OpenMP runtime ABI (__kmpc_fork_call, __kmpc_for_static_init_*, __kmpc_barrier, ...). Those calls
 * are renamed spine_kmpc_* in the kernel (compiler/parallel_loops.py), so a libgomp or libomp loaded into
 * the same process is never bound instead, and the few entry points they use are implemented here: no
 * OpenMP runtime exists for our riscv64 cross toolchain (zig ships none), and these few are all a kernel
 * needs.
 *
 * A loop runs on a team: the program's own thread (index 0) and helpers from a pool of threads of its
 * own (the grid's workers are busy with other programs). The team size is decided just before the loop
 * (spine_smt_parallel_begin) from the threads the launch was given (spine_grid_launch_threads: its thread
 * count, SPINE_NUM_THREADS on the host, or all cores): the grid already gives each of them a program when
 * there are at least as many programs, so a loop then runs in order on its program's thread; with fewer
 * programs each loop gets threads / programs threads, at most one per iteration. Iterations are split statically into
 * one contiguous, increasing block per thread.
 *
 * smt barriers count arrivals; a wait returns once the count reaches the barrier's expected count. Waits
 * that can never complete are detected instead of hanging: when every thread of the team is waiting or
 * has finished its iterations and the count is still short, no arrival can come; the wait then records
 * an assertion failure (raised by the launch) and returns.
 *
 * In the user's process (guarded launches) a fault on any thread of the team ends that thread's share
 * only; the others stop waiting at barriers, and once all are done the program's own thread takes the
 * first fault as its own, so the launch raises it like any other. A stopped launch (fault_guard.h) stops
 * the threads at barrier waits too, which hold nothing; the program's thread waiting for its helpers is
 * never stopped, since they use the team on its stack. */
#define _GNU_SOURCE
#include "grid.h"
#include "device_io.h"
#include "fault_guard.h"

#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#define MAX_HELPERS 255
#define MAX_ARGS 8

typedef void (*microtask_t)(int32_t *gtid, int32_t *btid, ...);

typedef struct {
    int size;
    microtask_t fn;
    int argc;
    void *args[MAX_ARGS];
    _Atomic int blocked;        /* threads waiting at an smt barrier or done with their iterations */
    _Atomic int finished;       /* threads that returned from the microtask */
    _Atomic int at_barrier;     /* threads in the current team barrier */
    _Atomic int barrier_round;
    int guarded;                /* the program's thread runs under the fault guard: so does every member */
    _Atomic int faulted;        /* a member faulted; the first fault is kept below */
    spine_fault_t fault;
} team_t;

typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t wake;
    team_t *team;               /* the team to join, set by the thread that forks */
    int index;
    int busy;                   /* taken by a team (under pool_lock) */
} helper_t;

static helper_t helpers[MAX_HELPERS];
static int num_helpers;
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;

/* In a forked child the helpers are gone: a new pool starts at the child's first parallel loop. */
static void helpers_after_fork(void) {
    pthread_mutex_init(&pool_lock, NULL);
    for (int i = 0; i < num_helpers; i++) {
        helpers[i].team = NULL;
        helpers[i].busy = 0;
    }
    num_helpers = 0;
}

static void register_fork_handler(void) { pthread_atfork(NULL, NULL, helpers_after_fork); }

static __thread team_t *current_team;
static __thread int team_index;
static __thread int requested_size;

static void pause_briefly(int round) {
    if (round < 64) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
        return;
    }
    if (round < 256) {
        sched_yield();
        return;
    }
    struct timespec t = {0, 20000};
    nanosleep(&t, NULL);
}

static int team_size_for(int64_t programs, int64_t iterations) {
    int64_t threads = spine_grid_launch_threads();
    if (current_team != NULL || programs <= 0 || programs >= threads) return 1;
    int64_t size = threads / programs;
    if (size > iterations) size = iterations;
    if (size > MAX_HELPERS + 1) size = MAX_HELPERS + 1;
    return size < 1 ? 1 : (int)size;
}

void spine_smt_parallel_begin(int32_t programs, int64_t iterations) {
    requested_size = team_size_for(programs, iterations);
}

int32_t spine_smt_num_threads(int32_t programs) {
    return current_team != NULL ? current_team->size : team_size_for(programs, INT64_MAX);
}

static void call_microtask(team_t *team, int index) {
    int32_t gtid = index, btid = index;
    void **a = team->args;
    switch (team->argc) {
    case 0: team->fn(&gtid, &btid); break;
    case 1: team->fn(&gtid, &btid, a[0]); break;
    case 2: team->fn(&gtid, &btid, a[0], a[1]); break;
    case 3: team->fn(&gtid, &btid, a[0], a[1], a[2]); break;
    case 4: team->fn(&gtid, &btid, a[0], a[1], a[2], a[3]); break;
    case 5: team->fn(&gtid, &btid, a[0], a[1], a[2], a[3], a[4]); break;
    case 6: team->fn(&gtid, &btid, a[0], a[1], a[2], a[3], a[4], a[5]); break;
    case 7: team->fn(&gtid, &btid, a[0], a[1], a[2], a[3], a[4], a[5], a[6]); break;
    default: team->fn(&gtid, &btid, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]); break;
    }
}

static void call_microtask_thunk(void *team) { call_microtask(team, team_index); }

static void run_member(team_t *team, int index) {
    team_t *outer_team = current_team;     /* a loop inside another's iteration runs on a team of one */
    int outer_index = team_index;
    current_team = team;
    team_index = index;
    spine_fault_t fault;
    if (!team->guarded) {
        call_microtask(team, index);
    } else if (spine_guarded_call(call_microtask_thunk, team, &fault) && !atomic_exchange(&team->faulted, 1)) {
        team->fault = fault;
    }
    current_team = outer_team;
    team_index = outer_index;
    atomic_fetch_add(&team->finished, 1);
}

static void *helper_main(void *arg) {
    helper_t *h = arg;
    spine_fault_guard_thread_init();
    for (;;) {
        pthread_mutex_lock(&h->lock);
        while (h->team == NULL) pthread_cond_wait(&h->wake, &h->lock);
        team_t *team = h->team;
        int index = h->index;
        h->team = NULL;
        pthread_mutex_unlock(&h->lock);
        run_member(team, index);
        pthread_mutex_lock(&pool_lock);
        h->busy = 0;
        pthread_mutex_unlock(&pool_lock);
    }
    return NULL;
}

/* Up to `wanted` idle helpers, started on first use. */
static int take_helpers(helper_t **taken, int wanted) {
    int got = 0;
    static pthread_once_t fork_handler = PTHREAD_ONCE_INIT;
    pthread_once(&fork_handler, register_fork_handler);
    pthread_mutex_lock(&pool_lock);
    for (int i = 0; i < MAX_HELPERS && got < wanted; i++) {
        if (i == num_helpers) {
            helper_t *h = &helpers[i];
            pthread_mutex_init(&h->lock, NULL);
            pthread_cond_init(&h->wake, NULL);
            pthread_attr_t attr;
            pthread_attr_init(&attr);
            pthread_attr_setstacksize(&attr, 64u << 20);   /* kernels keep tiles on the stack */
            pthread_t t;
            int rc = pthread_create(&t, &attr, helper_main, h);
            pthread_attr_destroy(&attr);
            if (rc) break;
            pthread_detach(t);
            num_helpers++;
        }
        if (!helpers[i].busy) {
            helpers[i].busy = 1;
            taken[got++] = &helpers[i];
        }
    }
    pthread_mutex_unlock(&pool_lock);
    return got;
}

void spine_kmpc_fork_call(void *loc, int32_t argc, microtask_t fn, ...) {
    (void)loc;
    team_t team = {0};
    team.fn = fn;
    team.argc = argc;
    if (argc > MAX_ARGS) abort();   /* MLIR's translation passes one aggregate of the captured values */
    va_list ap;
    va_start(ap, fn);
    for (int i = 0; i < argc; i++) team.args[i] = va_arg(ap, void *);
    va_end(ap);
    int wanted = requested_size > 1 ? requested_size - 1 : 0;
    requested_size = 0;
    helper_t *taken[MAX_HELPERS];
    int got = wanted ? take_helpers(taken, wanted) : 0;
    team.size = 1 + got;
    team.guarded = spine_fault_guard_active();
    for (int i = 0; i < got; i++) {
        pthread_mutex_lock(&taken[i]->lock);
        taken[i]->team = &team;
        taken[i]->index = i + 1;
        pthread_cond_signal(&taken[i]->wake);
        pthread_mutex_unlock(&taken[i]->lock);
    }
    run_member(&team, 0);
    /* The helpers use `team`, on this stack: this thread must not be stopped before they are done (they
     * are stopped themselves). */
    spine_fault_guard_unstoppable(1);
    for (int round = 0; atomic_load(&team.finished) < team.size; round++) pause_briefly(round);
    spine_fault_guard_unstoppable(0);
    if (atomic_load(&team.faulted)) spine_fault_raise(&team.fault);
}

int32_t spine_kmpc_global_thread_num(void *loc) {
    (void)loc;
    return team_index;
}

/* This thread's block of the iterations lower..upper (inclusive) by incr: one contiguous block per thread,
 * in order. A thread with no iterations gets upper = lower - incr. */
#define STATIC_INIT(name, T)                                                                                 \
    void name(void *loc, int32_t gtid, int32_t schedule, int32_t *last, T *lower, T *upper, T *stride,     \
              T incr, T chunk) {                                                                          \
        (void)loc; (void)gtid; (void)schedule; (void)chunk;                                                \
        int size = current_team ? current_team->size : 1, index = current_team ? team_index : 0;           \
        T n = (T)((*upper - *lower) / incr + 1);                                                           \
        T base = n / size, extra = n % size;                                                               \
        T start = (T)index * base + ((T)index < extra ? (T)index : extra);                                 \
        T count = base + ((T)index < extra ? 1 : 0);                                                       \
        T first = *lower + start * incr;                                                                   \
        *lower = first;                                                                                    \
        *upper = first + count * incr - incr;                                                              \
        *stride = n * incr;                                                                                \
        *last = count > 0 && start + count == n;                                                           \
    }
STATIC_INIT(spine_kmpc_for_static_init_4, int32_t)
STATIC_INIT(spine_kmpc_for_static_init_4u, uint32_t)
STATIC_INIT(spine_kmpc_for_static_init_8, int64_t)
STATIC_INIT(spine_kmpc_for_static_init_8u, uint64_t)

void spine_kmpc_for_static_fini(void *loc, int32_t gtid) { (void)loc; (void)gtid; }

/* The barrier ending a loop: every thread of the team has done its iterations. A thread here counts as
 * blocked for the smt barriers' deadlock detection. */
void spine_kmpc_barrier(void *loc, int32_t gtid) {
    (void)loc; (void)gtid;
    team_t *team = current_team;
    if (team == NULL || team->size == 1) return;
    atomic_fetch_add(&team->blocked, 1);
    int round_seen = atomic_load(&team->barrier_round);
    if (atomic_fetch_add(&team->at_barrier, 1) + 1 == team->size) {
        atomic_store(&team->at_barrier, 0);
        atomic_store(&team->blocked, 0);
        atomic_fetch_add(&team->barrier_round, 1);
        return;
    }
    for (int round = 0; atomic_load(&team->barrier_round) == round_seen && !atomic_load(&team->faulted); round++) {
        pause_briefly(round);
        spine_fault_guard_safe_point();
    }
}

/* ------------------------------------------------------------------------------------------ smt barriers */

typedef struct {
    _Atomic int64_t arrivals;
    _Atomic int64_t expected;
} smt_barrier_t;

void spine_smt_barrier_init(int64_t handle, int32_t expected) {
    smt_barrier_t *b = (smt_barrier_t *)(intptr_t)handle;
    atomic_store(&b->arrivals, 0);
    atomic_store(&b->expected, expected);
}

void spine_smt_barrier_set_expect(int64_t handle, int32_t expected) {
    atomic_store(&((smt_barrier_t *)(intptr_t)handle)->expected, expected);
}

void spine_smt_barrier_arrive(int64_t handle) {
    atomic_fetch_add(&((smt_barrier_t *)(intptr_t)handle)->arrivals, 1);
}

static int complete(smt_barrier_t *b) { return atomic_load(&b->arrivals) >= atomic_load(&b->expected); }

static const char never_arrives[] =
    "smt.barrier_wait can never complete: every thread of the parallel loop is waiting or done, and the "
    "barrier has fewer arrivals than it expects";

void spine_smt_barrier_wait(int64_t handle) {
    smt_barrier_t *b = (smt_barrier_t *)(intptr_t)handle;
    if (complete(b)) return;
    team_t *team = current_team;
    int size = team ? team->size : 1;
    if (team) atomic_fetch_add(&team->blocked, 1);
    for (int round = 0;; round++) {
        if (complete(b) || (team && atomic_load(&team->faulted))) break;
        if ((team ? atomic_load(&team->blocked) : 1) >= size && !complete(b)) {
            spine_assert_fail((int64_t)(intptr_t)never_arrives, -1, -1, -1, 0);
            break;
        }
        pause_briefly(round);
        spine_fault_guard_safe_point();
    }
    if (team) atomic_fetch_sub(&team->blocked, 1);
}
