/* Packed panels kept per thread for the rest of a launch (shared_panels.h says what for and when).
 *
 * Every request costs the kernel a call, so neither of its paths scans the slots: a panel is found through
 * the slot that followed the previous request's last time or through a hash table of the slots' keys, and
 * a new one goes into the next slot of a ring. Scanning every slot, as a first version did, cost more
 * instructions on riscv64 than packing a 32 x 32 tile of B saves. */
#include "shared_panels.h"
#include "grid.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define BUCKETS 256           /* the hash table's: a power of two */

typedef struct {
    uint64_t key[4];          /* source, row step, column step, layout */
    uint64_t launch;          /* the launch it was packed in (0: empty) */
    uint64_t bytes;           /* the buffer's size */
    void *buffer;
    int next;                 /* the slot asked for right after this one last time (-1: none) */
    int chain;                /* the next slot in this one's bucket (-1: none) */
    int linked;               /* whether its key is in the hash table */
} panel_t;

typedef struct {
    panel_t slots[SPINE_SHARED_PANEL_SLOTS];
    int buckets[BUCKETS];     /* the first slot of each bucket's chain (-1: none) */
    uint64_t bytes;           /* all slots' buffers together */
    uint64_t launch;          /* the launch of the latest request */
    int last;                 /* the slot the latest request got (-1: none) */
    int ring;                 /* the slot the next new panel goes into */
    int first;                /* the slot of this launch's first new panel (-1: none yet) */
} panels_t;

static __thread panels_t *thread_panels;
static pthread_key_t panels_key;
static pthread_once_t panels_once = PTHREAD_ONCE_INIT;

static void free_panels(void *p) {
    panels_t *panels = p;
    for (int i = 0; i < SPINE_SHARED_PANEL_SLOTS; i++) free(panels->slots[i].buffer);
    free(panels);
}

static void make_key(void) { pthread_key_create(&panels_key, free_panels); }

static panels_t *this_thread(void) {
    if (thread_panels) return thread_panels;
    pthread_once(&panels_once, make_key);
    panels_t *panels = calloc(1, sizeof(panels_t));
    if (!panels) return NULL;
    panels->last = panels->first = -1;
    for (int i = 0; i < SPINE_SHARED_PANEL_SLOTS; i++) panels->slots[i].next = panels->slots[i].chain = -1;
    memset(panels->buckets, 0xff, sizeof(panels->buckets));
    pthread_setspecific(panels_key, panels);   /* freed when the thread ends */
    return thread_panels = panels;
}

static unsigned bucket(const uint64_t key[4]) {
    uint64_t h = key[0] * 0x9E3779B97F4A7C15ull ^ key[1] * 0xC2B2AE3D27D4EB4Full ^ key[2] ^ key[3];
    return (unsigned)(h >> 32 ^ h) & (BUCKETS - 1);
}

static void link_key(panels_t *panels, int index) {
    panel_t *slot = &panels->slots[index];
    int *head = &panels->buckets[bucket(slot->key)];
    slot->chain = *head;
    *head = index;
    slot->linked = 1;
}

static void unlink_key(panels_t *panels, int index) {
    panel_t *slot = &panels->slots[index];
    if (!slot->linked) return;
    int *at = &panels->buckets[bucket(slot->key)];
    while (*at != index) at = &panels->slots[*at].chain;
    *at = slot->chain;
    slot->linked = 0;
}

static int holds(const panel_t *s, const uint64_t key[4], uint64_t launch, uint64_t bytes) {
    return s->key[0] == key[0] && s->launch == launch && s->bytes >= bytes && s->key[1] == key[1]
        && s->key[2] == key[2] && s->key[3] == key[3];
}

/* The slot holding this panel, or -1. The programs of a column ask for the same panels in the same order
 * (one per block of k), so the slot that followed the previous request's last time is tried first, then
 * the key's bucket. */
static int find(const panels_t *panels, const uint64_t key[4], uint64_t launch, uint64_t bytes) {
    if (panels->last >= 0) {
        int hint = panels->slots[panels->last].next;
        if (hint >= 0 && holds(&panels->slots[hint], key, launch, bytes)) return hint;
    }
    for (int i = panels->buckets[bucket(key)]; i >= 0; i = panels->slots[i].chain)
        if (holds(&panels->slots[i], key, launch, bytes)) return i;
    return -1;
}

static void release(panels_t *panels, panel_t *slot) {
    unlink_key(panels, (int)(slot - panels->slots));
    panels->bytes -= slot->bytes;
    free(slot->buffer);
    memset(slot, 0, sizeof(*slot));
    slot->next = slot->chain = -1;
}

/* The slot a new panel of `bytes` goes into: the ring's next, the one packed longest ago (a launch starts
 * at the slot of the first panel the one before packed: a kernel launched again packs its panels into the
 * same buffers, in the same order, allocating none); then the slots after it go, in the ring's order,
 * until the new panel fits the byte budget. */
static panel_t *victim(panels_t *panels, uint64_t bytes) {
    panel_t *chosen = &panels->slots[panels->ring];
    panels->ring = (panels->ring + 1) % SPINE_SHARED_PANEL_SLOTS;
    for (int i = panels->ring; panels->bytes - chosen->bytes + bytes > SPINE_SHARED_PANEL_BYTES;
         i = (i + 1) % SPINE_SHARED_PANEL_SLOTS) {
        panel_t *s = &panels->slots[i];
        if (s == chosen) break;          /* a panel past the budget alone: it is kept all the same */
        if (s->buffer) release(panels, s);
    }
    return chosen;
}

static uint64_t answer(panels_t *panels, int index, uint64_t found) {
    if (panels->last >= 0) panels->slots[panels->last].next = index;
    panels->last = index;
    return (uint64_t)(uintptr_t)panels->slots[index].buffer | found;
}

uint64_t spine_shared_panel(uint64_t source, uint64_t row_step, uint64_t column_step, uint64_t layout,
                            uint64_t bytes) {
    /* Programs dealt out one at a time to several threads rarely follow one another on a thread: a kept
     * panel would seldom be read again, and packing into the thread's own stack panel is faster than into
     * a kept one, whose lines are colder (bench/RESULTS.md). */
    if (spine_grid_run_length() < 2) return 0;
    panels_t *panels = this_thread();
    if (!panels) return 0;
    uint64_t launch = spine_grid_launch_number();
    if (launch != panels->launch) {
        panels->launch = launch;
        if (panels->first >= 0) panels->ring = panels->first;
        panels->last = panels->first = -1;
    }
    uint64_t key[4] = {source, row_step, column_step, layout};
    int index = find(panels, key, launch, bytes);
    if (index >= 0) return answer(panels, index, 1);
    uint64_t size = (bytes + 63) & ~(uint64_t)63;
    if (size == 0) size = 64;
    panel_t *slot = victim(panels, size);
    if (slot->bytes != size) {
        release(panels, slot);
        slot->buffer = aligned_alloc(64, size);
        if (!slot->buffer) return 0;
        slot->bytes = size;
        panels->bytes += size;
    }
    index = (int)(slot - panels->slots);
    if (panels->first < 0) panels->first = index;
    unlink_key(panels, index);
    memcpy(slot->key, key, sizeof(key));
    slot->launch = launch;
    link_key(panels, index);
    return answer(panels, index, 0);
}
