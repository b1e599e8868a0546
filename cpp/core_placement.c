/* See core_placement.h. Written by hand: the marchid lines are Linux's RISC-V /proc/cpuinfo format
 * ("processor\t: 3", "marchid\t\t: 0x8000000058000001"), which no library parses. */
#define _GNU_SOURCE
#include "core_placement.h"
#include "grid.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The value after the colon of a line that starts with `key` (then blanks and ':'), or NULL. */
static const char *field(const char *line, const char *key) {
    size_t n = strlen(key);
    if (strncmp(line, key, n)) return NULL;
    line += n;
    while (*line == ' ' || *line == '\t') line++;
    return *line == ':' ? line + 1 : NULL;
}

int spine_cores_with_marchid(const char *cpuinfo, uint64_t marchid, int *cpus, int max, int *listed) {
    int found = 0, processor = -1;
    *listed = 0;
    for (const char *line = cpuinfo; line && *line; line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
        const char *value;
        if ((value = field(line, "processor"))) {
            processor = (int)strtol(value, NULL, 10);
        } else if ((value = field(line, "marchid")) && processor >= 0) {
            ++*listed;
            if (strtoull(value, NULL, 16) == marchid && found < max) cpus[found++] = processor;
            processor = -1;   /* one marchid per processor */
        }
    }
    return found;
}

static char *read_cpuinfo(void) {
    int fd = open("/proc/cpuinfo", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return NULL;
    size_t size = 0, capacity = 1 << 16;
    char *text = malloc(capacity + 1);
    for (ssize_t got; text && (got = read(fd, text + size, capacity - size)) > 0;) {
        size += (size_t)got;
        if (size == capacity) {
            char *grown = realloc(text, 2 * capacity + 1);
            if (!grown) { free(text); text = NULL; break; }
            text = grown;
            capacity *= 2;
        }
    }
    close(fd);
    if (text) text[size] = 0;
    return text;
}

/* SpacemiT's marchids (spine/spacemit_cores.py): K1's cores, and the A60 its matrix unit's cores stand for */
#define MARCHID_X60 0x8000000058000001ull
#define MARCHID_A60 0x8000000041000001ull

int spine_place_for_marchid(uint64_t marchid, const char *cpuinfo, char *error, int size) {
    if (!marchid || !cpuinfo) return 0;   /* nothing to place, or nothing says which core is which */
    int cpus[SPINE_MAX_PLACED_CPUS];   /* a local: in-process loads may run on several threads at once */
    int listed, found = spine_cores_with_marchid(cpuinfo, marchid, cpus, SPINE_MAX_PLACED_CPUS, &listed);
    if (!listed) return 0;
    if (!found && marchid == MARCHID_A60) {
        /* A K1 names all eight cores X60; only cluster 0, the first four, has the matrix unit (SpacemiT's own
         * rule, ggml-cpu/spacemit/ime_env.cpp) */
        int x60 = spine_cores_with_marchid(cpuinfo, MARCHID_X60, cpus, SPINE_MAX_PLACED_CPUS, &listed);
        if (x60 == 8 && listed == 8) found = 4;
    }
    if (!found) {
        snprintf(error, (size_t)size, "this kernel was built for the SpacemiT cores whose marchid is 0x%llx "
                 "(%s), and none of this machine's %d cores is one (/proc/cpuinfo); compile for the cores it has "
                 "(SPINE_RISCV_CPU%s)",
                 (unsigned long long)marchid,
                 marchid == MARCHID_A60 ? "K1's cluster 0, whose cores have its matrix unit"
                                        : "spacemit-a100: VLEN 1024 and its matrix unit",
                 listed, marchid == MARCHID_A60 ? ", or SPINE_MATRIX_UNIT=0" : "");
        return -1;
    }
    if (spine_grid_place(cpus, found)) {
        snprintf(error, (size_t)size, "cannot place the grid on the %d cores with marchid 0x%llx", found,
                 (unsigned long long)marchid);
        return -1;
    }
    return 0;
}

int spine_place_for_kernel(void *library, char *error, int size) {
    const uint64_t *marchid = dlsym(library, "spine_core_marchid");
    if (!marchid) return 0;
    char *cpuinfo = read_cpuinfo();
    int result = spine_place_for_marchid(*marchid, cpuinfo, error, size);
    free(cpuinfo);
    return result;
}
