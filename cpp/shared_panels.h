/* Packed operand panels kept for the rest of a launch, so that the programs a thread runs one after another
 * pack a matrix tile they share (the same columns of B for every row block of C) once.
 *
 * A kernel asks for a panel by what it packs: the source tile's address, its two strides, and a word that
 * names the packing (the layout, its sizes and element type). The answer is a 64-byte aligned buffer of
 * `bytes` bytes belonging to the calling thread, with its lowest bit set when that buffer already holds
 * this packing of this source, packed earlier in the same launch on the same thread (the kernel then
 * skips packing), and clear when the kernel must pack into it now. Buffers are the calling thread's alone,
 * so no two threads ever share one, and the compiler asks only for sources no program writes during the
 * launch (compiler/shared_panels.py), so a panel packed earlier in the launch is still what packing would
 * give. Every launch (spine_grid_launch_number) starts with nothing kept: memory may change between
 * launches.
 *
 * A thread keeps at most SPINE_SHARED_PANEL_SLOTS panels and SPINE_SHARED_PANEL_BYTES bytes; a request past
 * those replaces the panel packed longest ago. The answer is 0 where nothing is kept: a launch that
 * deals its programs out to several threads one at a time (spine_grid_run_length), or no memory left;
 * the kernel then packs into its own panel, as it would without this. */
#ifndef SPINE_SHARED_PANELS_H
#define SPINE_SHARED_PANELS_H
#include <stdint.h>

#ifndef SPINE_SHARED_PANEL_SLOTS
#define SPINE_SHARED_PANEL_SLOTS 64
#endif
#ifndef SPINE_SHARED_PANEL_BYTES
#define SPINE_SHARED_PANEL_BYTES (8u << 20)
#endif

uint64_t spine_shared_panel(uint64_t source, uint64_t row_step, uint64_t column_step, uint64_t layout,
                            uint64_t bytes);

#endif
