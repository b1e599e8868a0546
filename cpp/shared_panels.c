/* Packed panels kept per thread for the rest of a launch (shared_panels.h says what for and when). */
#include "shared_panels.h"
#include "grid.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint64_t key[4];          /* source, row step, column step, layout */
    uint64_t launch;          /* the launch it was packed in (0: empty) */
    uint64_t used;            /* when it was last asked for, in this thread's requests */
    uint64_t bytes;           /* the buffer's size */
    void *buffer;
} panel_t;

typedef struct {
    panel_t slots[SPINE_SHARED_PANEL_SLOTS];
    uint64_t requests;
    uint64_t bytes;           /* all slots' buffers together */
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
    thread_panels = calloc(1, sizeof(panels_t));
    if (thread_panels) pthread_setspecific(panels_key, thread_panels);   /* freed when the thread ends */
    return thread_panels;
}

static void release(panels_t *panels, panel_t *slot) {
    panels->bytes -= slot->bytes;
    free(slot->buffer);
    memset(slot, 0, sizeof(*slot));
}

/* Whether slot s is a better home than `chosen` for a new panel of `bytes`: a stale slot (an earlier
 * launch's, or empty) before one of this launch; among stale ones, one whose buffer has the size (no
 * allocation), then the one asked for last (its lines are the likeliest still cached); among this
 * launch's, the one asked for longest ago. */
static int better(const panel_t *s, const panel_t *chosen, uint64_t launch, uint64_t bytes) {
    int stale = s->launch != launch, chosen_stale = chosen->launch != launch;
    if (stale != chosen_stale) return stale;
    if (!stale) return s->used < chosen->used;
    int fits = s->bytes == bytes, chosen_fits = chosen->bytes == bytes;
    if (fits != chosen_fits) return fits;
    return s->used > chosen->used;
}

/* The slot a new panel goes into; then the oldest others go until the new panel fits the byte budget. */
static panel_t *victim(panels_t *panels, uint64_t launch, uint64_t bytes) {
    panel_t *chosen = &panels->slots[0];
    for (int i = 1; i < SPINE_SHARED_PANEL_SLOTS; i++)
        if (better(&panels->slots[i], chosen, launch, bytes)) chosen = &panels->slots[i];
    for (;;) {
        uint64_t others = panels->bytes - chosen->bytes;
        if (others + bytes <= SPINE_SHARED_PANEL_BYTES) break;
        panel_t *oldest = NULL;
        for (int i = 0; i < SPINE_SHARED_PANEL_SLOTS; i++) {
            panel_t *s = &panels->slots[i];
            if (s != chosen && s->buffer && (!oldest || s->used < oldest->used)) oldest = s;
        }
        if (!oldest) break;             /* a panel past the budget alone: it is kept all the same */
        release(panels, oldest);
    }
    return chosen;
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
    uint64_t key[4] = {source, row_step, column_step, layout};
    panels->requests++;
    for (int i = 0; i < SPINE_SHARED_PANEL_SLOTS; i++) {
        panel_t *s = &panels->slots[i];
        if (s->launch == launch && s->bytes >= bytes && memcmp(s->key, key, sizeof(key)) == 0) {
            s->used = panels->requests;
            return (uint64_t)(uintptr_t)s->buffer | 1;
        }
    }
    uint64_t size = (bytes + 63) & ~(uint64_t)63;
    if (size == 0) size = 64;
    panel_t *slot = victim(panels, launch, size);
    if (slot->bytes != size) {
        release(panels, slot);
        slot->buffer = aligned_alloc(64, size);
        if (!slot->buffer) return 0;
        slot->bytes = size;
        panels->bytes += size;
    }
    memcpy(slot->key, key, sizeof(key));
    slot->launch = launch;
    slot->used = panels->requests;
    return (uint64_t)(uintptr_t)slot->buffer;
}
