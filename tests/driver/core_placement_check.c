/* The guest (or host) half of test_core_placement.py: places the grid as cpp/core_placement.c would for a
 * kernel whose marchid is argv[1], given /proc/cpuinfo's text on stdin, then runs a grid of 256 programs
 * and prints the outcome ("error: ..." or "placed"), and the CPUs the programs ran on, one per line. */
#define _GNU_SOURCE
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "core_placement.h"
#include "grid.h"

#define PROGRAMS 256
static int ran_on[PROGRAMS];

static void program(void **args, int32_t px, int32_t py, int32_t pz, int32_t nx, int32_t ny, int32_t nz) {
    (void)args, (void)py, (void)pz, (void)nx, (void)ny, (void)nz;
    volatile double x = 0;
    for (int i = 0; i < 20000; i++) x += i;   /* long enough that every thread takes some */
    ran_on[px] = sched_getcpu();
}

int main(int argc, char **argv) {
    static char cpuinfo[1 << 16];
    size_t n = fread(cpuinfo, 1, sizeof cpuinfo - 1, stdin);
    cpuinfo[n] = 0;
    char error[512];
    if (spine_place_for_marchid(strtoull(argv[1], NULL, 16), n ? cpuinfo : NULL, error, sizeof error)) {
        printf("error: %s\n", error);
        return 0;
    }
    int placed[CPU_SETSIZE], count = spine_grid_placement(placed, CPU_SETSIZE);
    printf("placed");
    for (int i = 0; i < count; i++) printf("%s%d", i ? "," : " ", placed[i]);
    printf("\n");
    if (spine_run_grid(program, NULL, PROGRAMS, 1, 1, argc > 2 ? atoi(argv[2]) : 0)) return 1;
    int seen[CPU_SETSIZE] = {0};
    for (int i = 0; i < PROGRAMS; i++)
        if (ran_on[i] >= 0 && ran_on[i] < CPU_SETSIZE && !seen[ran_on[i]]++) printf("%d\n", ran_on[i]);
    return 0;
}
