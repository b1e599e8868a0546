/* A persistent pool of worker threads that pull chunks of program ids from a shared counter.
 *
 * Program instances of a Triton grid are independent, so dynamic chunking balances uneven kernels (masked
 * tails, early exits) without a static schedule. The calling thread works too, so a launch on one thread
 * costs no hand-off at all. */
#define _GNU_SOURCE
#include "grid.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#define MAX_WORKERS 256

typedef struct {
    spine_entry_fn fn;
    void **args;
    int32_t gx, gy, gz;
    int64_t total;
    int64_t chunk;
    int participants;          /* workers (besides the caller) taking part in this launch */
    _Atomic int64_t next;      /* next program id to hand out */
    _Atomic int finished;      /* workers done with this launch */
} launch_t;

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;  /* one launch at a time */
static pthread_mutex_t state_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t work_ready = PTHREAD_COND_INITIALIZER;
static pthread_cond_t work_done = PTHREAD_COND_INITIALIZER;
static launch_t current;
static uint64_t generation;
static int num_workers;

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
            int32_t x = (int32_t)(id % l->gx);
            int32_t y = (int32_t)((id / l->gx) % l->gy);
            int32_t z = (int32_t)(id / ((int64_t)l->gx * l->gy));
            l->fn(l->args, x, y, z, l->gx, l->gy, l->gz);
        }
    }
}

static void *worker_main(void *arg) {
    int index = (int)(intptr_t)arg;
    uint64_t seen = 0;
    for (;;) {
        pthread_mutex_lock(&state_lock);
        while (generation == seen) pthread_cond_wait(&work_ready, &state_lock);
        seen = generation;
        int takes_part = index < current.participants;
        pthread_mutex_unlock(&state_lock);
        if (takes_part) {
            run_chunks(&current);
            pthread_mutex_lock(&state_lock);
            if (atomic_fetch_add(&current.finished, 1) + 1 == current.participants)
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

int spine_run_grid(spine_entry_fn fn, void **args, int32_t gx, int32_t gy, int32_t gz, int32_t num_threads) {
    if (gx <= 0 || gy <= 0 || gz <= 0) return 0;
    int64_t total = (int64_t)gx * gy * gz;
    int threads = num_threads > 0 ? num_threads : spine_num_cores();
    if (threads > total) threads = (int)total;

    pthread_mutex_lock(&pool_lock);
    int helpers = threads - 1;
    if (helpers > 0 && grow_pool(helpers) != 0) helpers = num_workers;
    if (helpers > num_workers) helpers = num_workers;

    pthread_mutex_lock(&state_lock);
    current.fn = fn;
    current.args = args;
    current.gx = gx; current.gy = gy; current.gz = gz;
    current.total = total;
    /* Several chunks per thread balance uneven instances; one id per chunk when the grid is small. */
    current.chunk = total / ((int64_t)(helpers + 1) * 8);
    if (current.chunk < 1) current.chunk = 1;
    current.participants = helpers;
    atomic_store(&current.next, 0);
    atomic_store(&current.finished, 0);
    if (helpers > 0) {
        generation++;
        pthread_cond_broadcast(&work_ready);
    }
    pthread_mutex_unlock(&state_lock);

    run_chunks(&current);

    if (helpers > 0) {
        pthread_mutex_lock(&state_lock);
        while (atomic_load(&current.finished) < helpers) pthread_cond_wait(&work_done, &state_lock);
        pthread_mutex_unlock(&state_lock);
    }
    pthread_mutex_unlock(&pool_lock);
    return 0;
}
