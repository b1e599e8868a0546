/* A persistent pool of worker threads that pull chunks of program ids from a shared counter.
 *
 * Program instances of a Triton grid are independent, so dynamic chunking balances uneven kernels (masked
 * tails, early exits) without a static schedule. The calling thread works too, so a launch on one thread
 * costs no hand-off at all.
 *
 * Waking a sleeping thread costs tens of microseconds, more than a small kernel runs, so after a launch
 * the workers (and the caller, while it waits for them) poll for 200 us before they sleep:
 * back-to-back launches find them awake. A launch is published as one atomic word, generation and
 * participant count together, so a worker never mixes up two launches.
 *
 * Under the fault guard a launch that runs longer than its timeout (spine_grid_set_timeout_ns: the host
 * runtime passes SPINE_KERNEL_TIMEOUT, which spine/switches.py reads), or that Ctrl-C interrupts, is
 * stopped: a watchdog thread interrupts every thread in guarded code (fault_guard.h says where a thread may
 * be stopped, and what happens when one will not come back to such a place), and the launch reports it
 * like a fault. A thread stopped where it might have held a lock poisons the runtime: later launches refuse.
 *
 * In a process that has an OpenMP runtime loaded (PyTorch's), a launch runs on that runtime's team instead
 * of this pool (openmp_team.h says why), unless the grid is placed on some cores (spine_grid_place): the
 * chunks, the fault guard and the watchdog are the same on either.
 *
 * A child forked from a process whose pool had threads has none of them: the child starts a pool of its
 * own at its first launch, and its own watchdog, rather than waiting for threads that are not there. */
#define _GNU_SOURCE
#include "grid.h"
#include "fault_guard.h"
#include "openmp_team.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_WORKERS 256

/* How long idle threads poll before sleeping. */
static int64_t spin_ns = 200000;

void spine_grid_set_spin(int microseconds) { spin_ns = microseconds < 0 ? 0 : (int64_t)microseconds * 1000; }

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* Keeps polling while the deadline (checked every 64 rounds, clock reads cost) has not passed. */
static int keep_polling(int round, int64_t *deadline) {
    if (spin_ns == 0) return 0;
    if ((round & 63) != 0) return 1;
    int64_t t = now_ns();
    if (round == 0) *deadline = t + spin_ns;
    return t < *deadline;
}

typedef struct {
    spine_entry_fn fn;
    void **args;
    int32_t gx, gy, gz;
    int64_t total;
    int64_t chunk;
    _Atomic int64_t next;      /* next program id to hand out */
    _Atomic int finished;      /* workers done with this launch */
    _Atomic int faulted;       /* a program faulted (guarded launches); the first fault is kept below */
    spine_fault_t fault;
    int64_t fault_program;
    const spine_program_hooks_t *hooks;   /* around each program instance, or NULL */
    const spine_openmp_t *team;           /* the OpenMP runtime running the launch, or NULL: the pool */
} launch_t;

/* Whether kernels run under the fault guard (in the user's process) or may take the process down (the
 * QEMU kernel server, which the host restarts). */
static int guard_faults;
/* The program id this thread is running, for naming the one that faulted. */
static __thread int64_t running_program;
/* 0 on launching threads, k on the pool's k-th worker: profile records name the thread by it. */
static __thread int grid_thread_index;

int spine_grid_thread_index(void) { return grid_thread_index; }

/* Counts launches, under pool_lock; read by kernels while their launch runs. */
static _Atomic uint64_t launch_number;

uint64_t spine_grid_launch_number(void) { return atomic_load_explicit(&launch_number, memory_order_relaxed); }

/* The launch's run length (spine_grid_run_length), set with it. */
static _Atomic int64_t run_length;

int64_t spine_grid_run_length(void) { return atomic_load_explicit(&run_length, memory_order_relaxed); }

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;  /* one launch at a time */
static pthread_mutex_t state_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t work_ready = PTHREAD_COND_INITIALIZER;
static pthread_cond_t work_done = PTHREAD_COND_INITIALIZER;
static launch_t current;
/* (generation << 16) | participants of the launch in `current` */
static _Atomic uint64_t launch_word;
static int num_workers;

/* Where grid threads run (spine_grid_place): a CPU set, its size (0: anywhere) and a generation each thread
 * compares with the one it last applied, so that a new placement reaches the workers at their next launch. */
static cpu_set_t placement;
static _Atomic int placement_count;
static _Atomic unsigned placement_generation;
static __thread unsigned placement_seen;

int spine_grid_place(const int *cpus, int count) {
    if (count <= 0) return EINVAL;
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int i = 0; i < count; i++) {
        if (cpus[i] < 0 || cpus[i] >= CPU_SETSIZE) return EINVAL;
        CPU_SET(cpus[i], &set);
    }
    pthread_mutex_lock(&pool_lock);
    placement = set;
    atomic_store(&placement_count, CPU_COUNT(&set));
    atomic_fetch_add(&placement_generation, 1);
    pthread_mutex_unlock(&pool_lock);
    return 0;
}

int spine_grid_placement(int *cpus, int max) {
    int count = 0;
    pthread_mutex_lock(&pool_lock);
    if (atomic_load(&placement_count) > 0)
        for (int cpu = 0; cpu < CPU_SETSIZE && count < max; cpu++)
            if (CPU_ISSET(cpu, &placement)) cpus[count++] = cpu;
    pthread_mutex_unlock(&pool_lock);
    return count;
}

/* Moves the calling grid thread onto the placement's CPUs, once per placement. The set is read under the
 * generation it was published with: workers call this between launches, after the launch word (whose
 * release follows spine_grid_place's unlock) told them to run. */
static void follow_placement(void) {
    unsigned generation = atomic_load(&placement_generation);
    if (generation == placement_seen) return;
    placement_seen = generation;
    if (atomic_load(&placement_count) > 0) pthread_setaffinity_np(pthread_self(), sizeof placement, &placement);
}

/* Polling politely: a pause hint, and every so often the core goes to whoever else is runnable (the
 * launching thread, or under emulation the host process), so spinning never delays the next launch. */
static inline void cpu_relax(int round) {
    if ((round & 63) == 63) {
        sched_yield();
        return;
    }
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

int spine_num_cores(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static void run_chunks(launch_t *l) {
    for (;;) {
        int64_t start = atomic_fetch_add(&l->next, l->chunk);
        if (start >= l->total) return;
        int64_t end = start + l->chunk < l->total ? start + l->chunk : l->total;
        for (int64_t id = start; id < end; id++) {
            running_program = id;
            int32_t x = (int32_t)(id % l->gx);
            int32_t y = (int32_t)((id / l->gx) % l->gy);
            int32_t z = (int32_t)(id / ((int64_t)l->gx * l->gy));
            if (l->hooks) {
                l->hooks->begin(x, y, z);
                l->fn(l->args, x, y, z, l->gx, l->gy, l->gz);
                l->hooks->end();
            } else {
                l->fn(l->args, x, y, z, l->gx, l->gy, l->gz);
            }
        }
    }
}

static void run_chunks_thunk(void *launch) { run_chunks(launch); }

/* Kernels' non-temporal stores (spine/compiler/streaming_stores.py) are weakly ordered. Each thread fences
 * them once, after its share of a launch and before it reports done, rather than each program fencing its
 * own: an sfence waits until the stores have left the core, and after every row of a softmax that wait
 * cost a fifth of the kernel's time. */
static inline void fence_streaming_stores(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_sfence();
#endif
}

/* This thread's share of a launch; under the guard, a fault stops the whole launch and is recorded. */
static void run_share(launch_t *l) {
    spine_fault_t fault;
    if (!guard_faults) {
        run_chunks(l);
    } else if (spine_guarded_call(run_chunks_thunk, l, &fault)) {
        if (atomic_exchange(&l->faulted, 1) == 0) {
            l->fault = fault;
            l->fault_program = running_program;
        }
        atomic_store(&l->next, l->total);
    }
    fence_streaming_stores();
}

/* A member of the OpenMP team's share: member 0 is the launching thread. */
static void team_share(void *launch) {
    launch_t *l = launch;
    int index = l->team->thread_num();
    if (index > 0) {
        grid_thread_index = index;
        if (!spine_openmp_stack_is_roomy()) return;   /* the others take its chunks */
    }
    run_share(l);
}

static void on_sigint_during_launch(void);

void spine_grid_guard_faults(int on) {
    if (on) {
        spine_fault_guard_install();
        spine_fault_guard_on_sigint(on_sigint_during_launch);
    }
    guard_faults = on;
}

int spine_grid_take_fault(char *buffer, int size) {
    if (!atomic_load(&current.faulted)) return 0;
    launch_t *l = &current;
    char what[768];
    spine_fault_describe(&l->fault, what, sizeof what);
    int32_t x = (int32_t)(l->fault_program % l->gx), y = (int32_t)((l->fault_program / l->gx) % l->gy);
    int32_t z = (int32_t)(l->fault_program / ((int64_t)l->gx * l->gy));
    if (l->fault.signal == SPINE_FAULT_STOPPED)
        snprintf(buffer, (size_t)size, "%s; program (%d, %d, %d) was one of those running", what, x, y, z);
    else
        snprintf(buffer, (size_t)size, "%s, in program (%d, %d, %d)", what, x, y, z);
    atomic_store(&l->faulted, 0);
    return 1;
}

static uint64_t await_launch(uint64_t seen) {
    uint64_t word;
    int64_t deadline = 0;
    for (int i = 0; keep_polling(i, &deadline); i++) {
        word = atomic_load_explicit(&launch_word, memory_order_acquire);
        if ((word >> 16) != (seen >> 16)) return word;
        cpu_relax(i);
    }
    pthread_mutex_lock(&state_lock);
    while (((word = atomic_load_explicit(&launch_word, memory_order_acquire)) >> 16) == (seen >> 16))
        pthread_cond_wait(&work_ready, &state_lock);
    pthread_mutex_unlock(&state_lock);
    return word;
}

static void *worker_main(void *arg) {
    int index = (int)(intptr_t)arg;
    grid_thread_index = index + 1;
    uint64_t seen = 0;
    for (;;) {
        seen = await_launch(seen);
        int participants = (int)(seen & 0xffff);
        if (index >= participants) continue;
        follow_placement();
        run_share(&current);
        if (atomic_fetch_add(&current.finished, 1) + 1 == participants) {
            pthread_mutex_lock(&state_lock);
            pthread_cond_signal(&work_done);
            pthread_mutex_unlock(&state_lock);
        }
    }
    return NULL;
}

static int grow_pool(int wanted) {
    if (wanted > MAX_WORKERS) wanted = MAX_WORKERS;
    while (num_workers < wanted) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        /* Kernels keep tiles on the stack; give workers room for them. */
        pthread_attr_setstacksize(&attr, 64u << 20);
        int rc = pthread_create(&t, &attr, worker_main, (void *)(intptr_t)num_workers);
        pthread_attr_destroy(&attr);
        if (rc) return rc;
        pthread_detach(t);
        num_workers++;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------- the watchdog */

/* The guarded launch running now (its fault_guard number; 0: none), its deadline (CLOCK_MONOTONIC ns; 0:
 * none) and how often the watchdog looks (0: only when woken). Arming costs a launch a few atomic stores
 * and no system call: the watchdog polls a few times per timeout, and sleeps for good while no timeout is
 * set, until Ctrl-C wakes it through its pipe (write() is async-signal-safe; a condition variable is not). */
static _Atomic uint64_t watch_launch;
static _Atomic int64_t watch_deadline;
static _Atomic int64_t watch_period_ns;
static _Atomic uint64_t sigint_launch;   /* the launch Ctrl-C arrived during */
static int wake_pipe[2] = {-1, -1};
static int watchdog_started;   /* under the pool lock */

/* A stop in progress: the launch, why, and since when (the watchdog's own state). */
typedef struct {
    uint64_t launch;
    int reason;
    int64_t since;
} stopping_t;

static void wake_watchdog(void) {
    char c = 1;
    if (wake_pipe[1] >= 0 && write(wake_pipe[1], &c, 1) < 0) {}
}

/* From the SIGINT handler, during a launch. */
static void on_sigint_during_launch(void) {
    atomic_store(&sigint_launch, atomic_load(&watch_launch));
    wake_watchdog();
}

/* How long threads may stay outside kernel code, once asked to stop, before they are stopped anyway. */
static int64_t force_after_ns(int64_t period) {
    int64_t after = 4 * period;
    return period == 0 ? 1000000000 : after > 200000000 ? after : 200000000;
}

static stopping_t next_stop(stopping_t stopping, int64_t t) {
    uint64_t launch = atomic_load(&watch_launch);
    if (stopping.launch && stopping.launch != launch) stopping.launch = 0;   /* that launch is over */
    uint64_t interrupted = atomic_exchange(&sigint_launch, 0);
    if (stopping.launch || !launch) return stopping;
    int64_t deadline = atomic_load(&watch_deadline);
    int reason = interrupted == launch ? SPINE_STOP_INTERRUPT
                 : deadline && t >= deadline ? SPINE_STOP_TIMEOUT : 0;
    if (reason) stopping = (stopping_t){launch, reason, t};
    return stopping;
}

static void *watchdog_main(void *arg) {
    (void)arg;
    stopping_t stopping = {0, 0, 0};
    for (;;) {
        int64_t period = atomic_load(&watch_period_ns);
        /* While stopping, try again every millisecond: a thread outside kernel code is usually back in it
         * within microseconds. */
        int wait_ms = stopping.launch ? 1 : period ? (int)((period + 999999) / 1000000) : -1;
        struct pollfd wake = {wake_pipe[0], POLLIN, 0};
        if (poll(&wake, 1, wait_ms) > 0) {
            char drained[64];
            if (read(wake_pipe[0], drained, sizeof drained) < 0) {}
        }
        int64_t t = now_ns();
        stopping = next_stop(stopping, t);
        if (stopping.launch)
            spine_fault_guard_stop(stopping.launch, stopping.reason, t - stopping.since >= force_after_ns(period));
    }
    return NULL;
}

static void start_watchdog(void) {
    if (pipe2(wake_pipe, O_CLOEXEC | O_NONBLOCK) != 0) return;
    pthread_t t;
    if (pthread_create(&t, NULL, watchdog_main, NULL) == 0) pthread_detach(t);
}

/* The guarded launches' timeout in ns (0: none). In the user's own process there is none unless the user
 * sets one: a native kernel may legitimately run for many minutes (a large product on a slow or busy
 * machine), and only the user knows how long is too long. Read at every launch, so a change takes effect
 * at the next. */
static _Atomic int64_t kernel_timeout_ns;

void spine_grid_set_timeout_ns(int64_t nanoseconds) {
    atomic_store_explicit(&kernel_timeout_ns, nanoseconds > 0 ? nanoseconds : 0, memory_order_relaxed);
}

static void arm_watchdog(uint64_t launch, int64_t timeout) {
    if (!watchdog_started) {
        watchdog_started = 1;
        start_watchdog();
    }
    if (timeout) {
        int64_t period = timeout / 4 < 1000000000 ? timeout / 4 : 1000000000;
        if (period < 1000000) period = 1000000;
        if (atomic_exchange(&watch_period_ns, period) != period) wake_watchdog();
        atomic_store_explicit(&watch_deadline, now_ns() + timeout, memory_order_release);
    } else {
        atomic_store_explicit(&watch_deadline, 0, memory_order_release);
        atomic_store_explicit(&watch_period_ns, 0, memory_order_release);
    }
    atomic_store_explicit(&watch_launch, launch, memory_order_release);
}

static void disarm_watchdog(void) {
    atomic_store_explicit(&watch_launch, 0, memory_order_release);
    atomic_store_explicit(&watch_deadline, 0, memory_order_release);
}

static void await_helpers(int helpers) {
    int64_t deadline = 0;
    for (int i = 0; keep_polling(i, &deadline); i++) {
        if (atomic_load_explicit(&current.finished, memory_order_acquire) >= helpers) return;
        cpu_relax(i);
    }
    pthread_mutex_lock(&state_lock);
    while (atomic_load(&current.finished) < helpers) pthread_cond_wait(&work_done, &state_lock);
    pthread_mutex_unlock(&state_lock);
}

/* The running launch's threads (0: no launch), written under the pool lock before the launch is published
 * and read by its programs. */
static _Atomic int launch_threads;

/* In a forked child: no worker, no watchdog (the pipe to the parent's is closed), no launch; the locks are
 * new, since a thread of the parent's may have held one at the fork. */
static void pool_after_fork(void) {
    pthread_mutex_init(&pool_lock, NULL);
    pthread_mutex_init(&state_lock, NULL);
    pthread_cond_init(&work_ready, NULL);
    pthread_cond_init(&work_done, NULL);
    num_workers = 0;
    atomic_store(&launch_word, 0);
    atomic_store(&launch_threads, 0);
    if (wake_pipe[0] >= 0) {
        close(wake_pipe[0]);
        close(wake_pipe[1]);
        wake_pipe[0] = wake_pipe[1] = -1;
    }
    watchdog_started = 0;
    atomic_store(&watch_launch, 0);
    atomic_store(&watch_deadline, 0);
    atomic_store(&watch_period_ns, 0);
    atomic_store(&sigint_launch, 0);
}

static void register_fork_handler(void) { pthread_atfork(NULL, NULL, pool_after_fork); }

int spine_run_grid(spine_entry_fn fn, void **args, int32_t gx, int32_t gy, int32_t gz, int32_t num_threads) {
    return spine_run_grid_ex(fn, args, gx, gy, gz, num_threads, NULL);
}


int spine_grid_launch_threads(void) {
    int threads = atomic_load_explicit(&launch_threads, memory_order_relaxed);
    return threads > 0 ? threads : spine_num_cores();
}

int spine_run_grid_ex(spine_entry_fn fn, void **args, int32_t gx, int32_t gy, int32_t gz, int32_t num_threads,
                      const spine_program_hooks_t *hooks) {
    if (gx <= 0 || gy <= 0 || gz <= 0) return 0;
    int64_t total;
    /* The chunk counter runs past the total by up to an eighth of it: keep it clear of overflow too. */
    if (__builtin_mul_overflow((int64_t)gx * gy, (int64_t)gz, &total) || total > INT64_MAX / 2)
        return SPINE_GRID_TOO_LARGE;
    int requested = num_threads > 0 ? num_threads : spine_num_cores();
    int placed = atomic_load(&placement_count);
    if (placed > 0 && requested > placed) requested = placed;
    int threads = requested > total ? (int)total : requested;
    static pthread_once_t fork_handler = PTHREAD_ONCE_INIT;
    pthread_once(&fork_handler, register_fork_handler);

    pthread_mutex_lock(&pool_lock);
    follow_placement();
    if (guard_faults && spine_fault_guard_poisoned()) {
        pthread_mutex_unlock(&pool_lock);
        return SPINE_GRID_POISONED;
    }
    atomic_store_explicit(&launch_threads, requested, memory_order_relaxed);
    atomic_fetch_add_explicit(&launch_number, 1, memory_order_relaxed);   /* helpers see it with the launch */
    if (guard_faults) {
        int64_t timeout = atomic_load_explicit(&kernel_timeout_ns, memory_order_relaxed);
        /* Handlers installed behind our back (by C code: Python's are seen at once, see native.py) are
         * found within a thousand launches; a check costs a few system calls, 2 ns a launch this way. */
        static unsigned launches;
        if ((launches++ & 1023) == 0) spine_fault_guard_check_handlers();
        arm_watchdog(spine_fault_guard_begin_launch((const void *)fn), timeout);
    }
    const spine_openmp_t *team = threads > 1 && placed == 0 ? spine_openmp_loaded() : NULL;
    int helpers = team ? 0 : threads - 1;
    if (helpers > 0 && grow_pool(helpers) != 0) helpers = num_workers;
    if (helpers > num_workers) helpers = num_workers;

    current.fn = fn;
    current.args = args;
    current.gx = gx; current.gy = gy; current.gz = gz;
    current.total = total;
    current.hooks = hooks;
    current.team = team;
    /* Several chunks per thread balance uneven instances; one id per chunk when the grid is small. */
    current.chunk = total / ((int64_t)(team ? threads : helpers + 1) * 8);
    if (current.chunk < 1) current.chunk = 1;
    atomic_store_explicit(&run_length, threads > 1 ? current.chunk : total, memory_order_relaxed);
    atomic_store(&current.next, 0);
    atomic_store(&current.finished, 0);
    atomic_store(&current.faulted, 0);
    if (helpers > 0) {
        uint64_t generation = (atomic_load(&launch_word) >> 16) + 1;
        pthread_mutex_lock(&state_lock);
        atomic_store_explicit(&launch_word, (generation << 16) | (uint64_t)helpers, memory_order_release);
        pthread_cond_broadcast(&work_ready);
        pthread_mutex_unlock(&state_lock);
    }

    if (team)
        team->parallel(team_share, &current, (unsigned)threads, 0);
    else
        run_share(&current);

    if (helpers > 0) await_helpers(helpers);
    if (guard_faults) {
        disarm_watchdog();
        spine_fault_guard_end_launch();
    }
    int faulted = atomic_load(&current.faulted);
    int interrupted = faulted && current.fault.signal == SPINE_FAULT_STOPPED &&
                      (current.fault.flags & SPINE_FAULT_INTERRUPTED);
    atomic_store_explicit(&launch_threads, 0, memory_order_relaxed);
    pthread_mutex_unlock(&pool_lock);
    return interrupted ? SPINE_GRID_INTERRUPTED : faulted ? SPINE_GRID_FAULTED : 0;
}
