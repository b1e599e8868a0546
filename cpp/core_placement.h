/* Kernels whose code runs on only one kind of core (K3's A100: VLEN 1024 and its matrix unit; its X100 cores
 * have VLEN 256 and no matrix unit) name that core's marchid in `spine_core_marchid` (spine/ir_names.py,
 * spine/spacemit_cores.py); loading one places the grid's threads on the machine's cores of that kind
 * (spine_grid_place); so do kernels built for K1 whose products run on its matrix unit, which only cluster 0
 * has (the A60's marchid stands for those cores). Which kind a core is, Linux says per processor in /proc/cpuinfo's "marchid" lines, as
 * SpacemiT's own llama.cpp port reads them (ggml-cpu/spacemit/ime_env.cpp). */
#ifndef SPINE_CORE_PLACEMENT_H
#define SPINE_CORE_PLACEMENT_H
#include <stdint.h>

#define SPINE_MAX_PLACED_CPUS 1024

/* The processors of /proc/cpuinfo's text `cpuinfo` whose marchid is `marchid`, into cpus[] (at most `max`);
 * returns how many, and in *listed how many processors have a marchid line at all. */
int spine_cores_with_marchid(const char *cpuinfo, uint64_t marchid, int *cpus, int max, int *listed);

/* For a kernel library just loaded: 0 when it names no core, when this machine's /proc/cpuinfo names no
 * core's marchid (QEMU user mode, whose guest CPU is the one the kernel was built for), or when the grid
 * now runs on the cores it names; -1 with a message in `error` when no core here is of that kind. */
int spine_place_for_kernel(void *library, char *error, int size);

/* The same with /proc/cpuinfo's text given (`cpuinfo`, NULL: none) and the kernel's marchid (0: it names
 * none). */
int spine_place_for_marchid(uint64_t marchid, const char *cpuinfo, char *error, int size);

#endif
