/* Per-thread profile buffers (see profile_buffers.h).
 *
 * The hot path (spine_proton_record, and the grid's program records) touches only the calling thread's
 * own buffer, found through a thread-local pointer: no lock and no atomic operation. A thread's first
 * record allocates its buffer and links it into a global list with one compare-and-swap. Buffers are
 * read only by spine_profile_run_grid after the grid has returned, when every thread that ran programs has
 * finished (the grid's completion count orders their writes before our reads). */
#define _GNU_SOURCE
#include "profile_buffers.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_DEPTH 64
#define INITIAL_CAPACITY 1024u
#define MAX_CAPACITY (1u << 24)   /* records per thread per launch (640 MiB); more are dropped */
#define LOST UINT32_MAX           /* a stack entry whose record could not be stored */
#define NAME_SLOTS 256            /* distinct scope names one launch can report */
#define MAX_NAME 256

typedef struct thread_buffer {
    spine_profile_record_t *records;
    uint32_t count, capacity;
    uint32_t stack[MAX_DEPTH];     /* indexes of the open records, innermost last */
    uint32_t depth;
    uint32_t overflow;             /* starts beyond MAX_DEPTH whose ends are still to come */
    uint32_t program_depth;        /* stack depth below the running program's record */
    uint16_t thread;
    uint64_t dropped, unmatched;
    struct thread_buffer *next;
} thread_buffer_t;

static _Atomic(thread_buffer_t *) all_buffers;
static __thread thread_buffer_t *own_buffer;
static pthread_mutex_t profile_lock = PTHREAD_MUTEX_INITIALIZER;

/* ------------------------------------------------------------------------------------------- counter */

static inline uint64_t read_counter(void) {
#if defined(__x86_64__) || defined(__i386__)
    return __builtin_ia32_rdtsc();
#elif defined(__riscv) && __riscv_xlen == 64
    uint64_t t;
    __asm__ __volatile__("rdtime %0" : "=r"(t));
    return t;
#elif defined(__aarch64__)
    uint64_t t;
    __asm__ __volatile__("mrs %0, cntvct_el0" : "=r"(t));
    return t;
#else
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
#endif
}

uint64_t spine_profile_counter(void) { return read_counter(); }

const char *spine_profile_counter_name(void) {
#if defined(__x86_64__) || defined(__i386__)
    return "rdtsc";
#elif defined(__riscv) && __riscv_xlen == 64
    return "rdtime";
#elif defined(__aarch64__)
    return "cntvct_el0";
#else
    return "clock_gettime(CLOCK_MONOTONIC)";
#endif
}

static int64_t monotonic_ns(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
}

/* One reading of the counter and the clock taken together: the closest of a few tries. */
static void read_both(uint64_t *ticks, int64_t *ns) {
    uint64_t best = UINT64_MAX;
    for (int i = 0; i < 8; i++) {
        uint64_t before = read_counter();
        int64_t clock = monotonic_ns();
        uint64_t after = read_counter();
        if (after - before < best) {
            best = after - before;
            *ticks = before + (after - before) / 2;
            *ns = clock;
        }
    }
}

double spine_profile_calibrate(int32_t milliseconds, uint64_t *ticks, int64_t *monotonic) {
    uint64_t t0, t1;
    int64_t n0, n1;
    read_both(&t0, &n0);
    struct timespec pause = {milliseconds / 1000, (long)(milliseconds % 1000) * 1000000L};
    nanosleep(&pause, NULL);
    read_both(&t1, &n1);
    *ticks = t1;
    *monotonic = n1;
    return n1 > n0 ? (double)(t1 - t0) * 1e9 / (double)(n1 - n0) : 0.0;
}

/* ---------------------------------------------------------------------------------- thread buffers */

static thread_buffer_t *register_thread(void) {
    thread_buffer_t *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    b->thread = (uint16_t)spine_grid_thread_index();
    thread_buffer_t *head = atomic_load_explicit(&all_buffers, memory_order_relaxed);
    do {
        b->next = head;
    } while (!atomic_compare_exchange_weak_explicit(&all_buffers, &head, b, memory_order_release,
                                                    memory_order_relaxed));
    own_buffer = b;
    return b;
}

static inline thread_buffer_t *buffer(void) { return own_buffer ? own_buffer : register_thread(); }

static int grow(thread_buffer_t *b) {
    if (b->capacity >= MAX_CAPACITY) return 0;
    uint32_t capacity = b->capacity ? b->capacity * 2 : INITIAL_CAPACITY;
    spine_profile_record_t *records = realloc(b->records, (size_t)capacity * sizeof *records);
    if (!records) return 0;
    b->records = records;
    b->capacity = capacity;
    return 1;
}

/* The counter is read last, so the bookkeeping is not inside the interval. */
static void open_record(thread_buffer_t *b, uint64_t name, int32_t px, int32_t py, int32_t pz) {
    if (b->depth == MAX_DEPTH) {
        b->overflow++;
        b->dropped++;
        return;
    }
    uint32_t index = LOST;
    if (b->count < b->capacity || grow(b)) {
        index = b->count++;
        spine_profile_record_t *r = &b->records[index];
        r->name = name;
        r->pid[0] = px; r->pid[1] = py; r->pid[2] = pz;
        r->thread = b->thread;
        r->depth = (uint16_t)b->depth;
        r->end = 0;
    } else {
        b->dropped++;
    }
    b->stack[b->depth++] = index;
    if (index != LOST) b->records[index].start = read_counter();
}

static void close_record(thread_buffer_t *b, uint64_t name, uint64_t now) {
    if (b->overflow) {
        b->overflow--;
        return;
    }
    if (b->depth == 0) {
        b->unmatched++;  /* an end without its start */
        return;
    }
    uint32_t top = b->stack[b->depth - 1];
    if (top != LOST && b->records[top].name != name) {
        /* Improperly nested, or nothing open inside the running program (its own record is on top). */
        b->unmatched++;
        return;
    }
    b->depth--;
    if (top != LOST) b->records[top].end = now;
}

void spine_proton_record(int64_t name, int32_t is_start, int32_t px, int32_t py, int32_t pz) {
    if (is_start) {
        thread_buffer_t *b = buffer();
        if (b) open_record(b, (uint64_t)name, px, py, pz);
        return;
    }
    uint64_t now = read_counter();  /* first, so the bookkeeping is not inside the interval */
    thread_buffer_t *b = buffer();
    if (b) close_record(b, (uint64_t)name, now);
}

/* The grid's hooks around each program instance of a launch that records programs. */
static void program_begin(int32_t px, int32_t py, int32_t pz) {
    thread_buffer_t *b = buffer();
    if (!b) return;
    b->program_depth = b->depth;
    open_record(b, 0, px, py, pz);
}

/* Closes the program's record, and any scope the program left open (counted as unmatched). */
static void program_end(void) {
    uint64_t now = read_counter();
    thread_buffer_t *b = own_buffer;
    if (!b) return;
    b->unmatched += b->overflow;
    b->overflow = 0;
    while (b->depth > b->program_depth) {
        uint32_t top = b->stack[--b->depth];
        if (top == LOST) continue;
        b->records[top].end = now;
        if (b->depth > b->program_depth) b->unmatched++;
    }
}

/* ------------------------------------------------------------------------------------------ collect */

typedef struct {
    uint64_t address[NAME_SLOTS];
    uint32_t index[NAME_SLOTS];
    uint32_t count;
    size_t bytes;
} name_table_t;

static size_t name_length(uint64_t address) {
    return address ? strnlen((const char *)(uintptr_t)address, MAX_NAME) : 0;
}

/* The index of a name in the table, adding it if new; names past NAME_SLOTS all map to the last slot. */
static uint32_t intern(name_table_t *t, uint64_t address) {
    if (address == 0) return 0;
    uint32_t slot = (uint32_t)((address >> 3) * 2654435761u) % NAME_SLOTS;
    for (uint32_t probe = 0; probe < NAME_SLOTS; probe++, slot = (slot + 1) % NAME_SLOTS) {
        if (t->address[slot] == address) return t->index[slot];
        if (t->address[slot] == 0) {
            if (t->count + 1 >= NAME_SLOTS) break;
            t->address[slot] = address;
            t->index[slot] = ++t->count;
            t->bytes += name_length(address) + 1;
            return t->index[slot];
        }
    }
    return NAME_SLOTS - 1;
}

static void write_names(const name_table_t *t, char *out) {
    /* index 0 is the program's empty name; each name lands at its index's position in order */
    const uint64_t *by_index[NAME_SLOTS] = {0};
    for (uint32_t s = 0; s < NAME_SLOTS; s++)
        if (t->address[s]) by_index[t->index[s]] = &t->address[s];
    *out++ = 0;
    for (uint32_t i = 1; i <= t->count; i++) {
        size_t n = name_length(*by_index[i]);
        memcpy(out, (const char *)(uintptr_t)*by_index[i], n);
        out[n] = 0;
        out += n + 1;
    }
}

/* Everything the threads recorded since the last collection, as one block; the buffers are emptied. */
static void *collect(uint64_t start, uint64_t end, uint32_t threads, uint64_t *size) {
    name_table_t names;
    memset(&names, 0, sizeof names);
    names.bytes = 1;
    uint64_t records = 0, dropped = 0, unmatched = 0;
    thread_buffer_t *head = atomic_load_explicit(&all_buffers, memory_order_acquire);
    for (thread_buffer_t *b = head; b; b = b->next) {
        records += b->count;
        for (uint32_t i = 0; i < b->count; i++) intern(&names, b->records[i].name);
    }
    size_t bytes = sizeof(spine_profile_header_t) + records * sizeof(spine_profile_record_t) + names.bytes;
    uint8_t *block = malloc(bytes);
    spine_profile_record_t *out = block ? (spine_profile_record_t *)(block + sizeof(spine_profile_header_t)) : NULL;
    for (thread_buffer_t *b = head; b; b = b->next) {
        /* A record still open now (a program abandoned by a fault) ends with the launch. */
        unmatched += b->unmatched + b->overflow + (b->depth > 0 ? b->depth : 0);
        dropped += b->dropped;
        for (uint32_t i = 0; out && i < b->count; i++) {
            spine_profile_record_t r = b->records[i];
            if (r.end == 0) r.end = end;
            r.name = intern(&names, r.name);
            *out++ = r;
        }
        b->count = b->depth = b->overflow = b->program_depth = 0;
        b->dropped = b->unmatched = 0;
    }
    if (!block) return NULL;
    spine_profile_header_t *h = (spine_profile_header_t *)block;
    h->magic = SPINE_PROFILE_MAGIC;
    h->version = SPINE_PROFILE_VERSION;
    h->records = (uint32_t)records;
    h->names = names.count + 1;
    h->names_bytes = (uint32_t)names.bytes;
    h->threads = threads;
    h->launch_start = start;
    h->launch_end = end;
    h->dropped = dropped;
    h->unmatched = unmatched;
    write_names(&names, (char *)out);
    *size = bytes;
    return block;
}

int spine_profile_run_grid(spine_entry_fn fn, void **args, int32_t gx, int32_t gy, int32_t gz,
                           int32_t num_threads, int32_t record_programs, void **block, uint64_t *size) {
    int64_t total;   /* too large a grid is refused by spine_run_grid_ex */
    if (__builtin_mul_overflow((int64_t)gx * gy, (int64_t)gz, &total)) total = INT64_MAX;
    int32_t threads = num_threads > 0 ? num_threads : spine_num_cores();
    if (total > 0 && threads > total) threads = (int32_t)total;
    pthread_mutex_lock(&profile_lock);
    uint64_t start = read_counter();
    static const spine_program_hooks_t record_each_program = {program_begin, program_end};
    int rc = spine_run_grid_ex(fn, args, gx, gy, gz, num_threads, record_programs ? &record_each_program : NULL);
    uint64_t end = read_counter();
    *size = 0;
    *block = collect(start, end, (uint32_t)threads, size);
    pthread_mutex_unlock(&profile_lock);
    return rc;
}

void spine_profile_free(void *block) { free(block); }
