/* The guest side of Spine's QEMU execution: a long-lived riscv64 process that loads kernel shared objects
 * and runs their grids, so a launch under emulation costs one pipe round trip rather than a process start.
 *
 * Usage: spine-kernel-server <arena fd> <arena bytes> <request fd> <reply fd> <lifeline fd>
 * The arena is an anonymous shared-memory file (memfd) that the host maps too: kernel arguments are copied
 * there by the host, and pointer arguments arrive as offsets into it. Nothing named is ever created, so
 * nothing is left behind when either side dies. The lifeline is a pipe the host never writes: when the host
 * process ends, however it ends, the pipe closes and this server exits, even in the middle of a kernel.
 *
 * Protocol on the two pipe descriptors, little-endian:
 *   request  = u32 command, u32 payload length, payload
 *   response = i32 status,  u32 payload length, payload   (status 0: success, 1: error, 2: device
 *              assertion failed, with its message)
 *   LOAD payload: path of a .so (host and guest share the filesystem); response payload: u32 handle,
 *                 u64 start and end of the kernel's executable code (for instruction tracing)
 *   RUN  payload: u32 handle, i32 gx, gy, gz, i32 threads, u32 nargs, u8 kind[nargs] (1: arena offset),
 *                 padding to 8 bytes, u64 value[nargs]
 *   RUN_PROFILED payload: u32 record_programs, then a RUN payload; response payload: the launch's profile
 *                 block (profile_buffers.h: header, records, scope names)
 *   COUNTER      response payload: f64 counter frequency (Hz), u64 counter ticks and i64 CLOCK_MONOTONIC ns
 *                 read together, then the counter's name (profile_buffers.h)
 * A kernel that faults kills this process; the host sees the pipe close and starts a new server. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include "device_io.h"
#include "fault_guard.h"
#include "grid.h"
#include "profile_buffers.h"

enum { CMD_LOAD = 1, CMD_RUN = 2, CMD_PING = 3, CMD_RUN_PROFILED = 4, CMD_COUNTER = 5 };
enum { STATUS_ASSERTION = 2 };  /* a device assertion failed during RUN; payload: its message */
#define MAX_KERNELS 4096

static spine_entry_fn kernels[MAX_KERNELS];
static uint32_t num_kernels;
static uint8_t *arena;
/* The protocol has pipes of its own, so whatever kernels or libraries print to stdout reaches the user's
 * terminal instead of corrupting replies. */
static int request_fd = -1, reply_fd = -1;

static int read_full(void *buf, size_t n) {
    uint8_t *p = buf;
    while (n) {
        ssize_t r = read(request_fd, p, n);
        if (r <= 0) return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

static void write_full(const void *buf, size_t n) {
    const uint8_t *p = buf;
    while (n) {
        ssize_t w = write(reply_fd, p, n);
        if (w <= 0) exit(2);
        p += w;
        n -= (size_t)w;
    }
}

static void reply(int32_t status, const void *payload, uint32_t len) {
    uint8_t header[8];
    memcpy(header, &status, 4);
    memcpy(header + 4, &len, 4);
    write_full(header, 8);
    if (len) write_full(payload, len);
}

static void reply_error(const char *what, const char *detail) {
    char msg[1024];
    int n = snprintf(msg, sizeof msg, "%s: %s", what, detail ? detail : "");
    reply(1, msg, (uint32_t)(n < (int)sizeof msg ? n : (int)sizeof msg - 1));
}

struct text_range {
    uintptr_t base;
    uint64_t lo, hi;
};

static int find_text(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    struct text_range *range = data;
    if (info->dlpi_addr != range->base) return 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X)) continue;
        uint64_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
        if (!range->lo || lo < range->lo) range->lo = lo;
        if (hi > range->hi) range->hi = hi;
    }
    return 1;
}

static void handle_load(char *payload, uint32_t len) {
    payload[len] = 0;
    const char *symbol = "spine_entry";
    void *lib = dlopen(payload, RTLD_NOW | RTLD_LOCAL);
    if (!lib) return reply_error("dlopen failed", dlerror());
    void *fn = dlsym(lib, symbol);
    if (!fn) return reply_error("entry point missing", dlerror());
    if (num_kernels == MAX_KERNELS) return reply_error("too many kernels loaded", NULL);
    kernels[num_kernels] = (spine_entry_fn)fn;
    uint32_t handle = num_kernels++;
    /* The kernel's executable range lets the host attribute traced guest instructions to it. */
    struct text_range range = {0, 0, 0};
    Dl_info info;
    if (dladdr(fn, &info)) {
        range.base = (uintptr_t)info.dli_fbase;
        dl_iterate_phdr(find_text, &range);
    }
    uint8_t out[20];
    memcpy(out, &handle, 4);
    memcpy(out + 4, &range.lo, 8);
    memcpy(out + 12, &range.hi, 8);
    reply(0, out, sizeof out);
}

/* record_programs < 0: an ordinary launch; else a profiled one, whose records are the reply. */
static void handle_run(uint8_t *payload, uint32_t len, int32_t record_programs) {
    if (len < 24) return reply_error("malformed RUN", NULL);
    uint32_t handle, nargs;
    int32_t g[4];
    memcpy(&handle, payload, 4);
    memcpy(g, payload + 4, 16);
    memcpy(&nargs, payload + 20, 4);
    size_t kinds_at = 24, values_at = (kinds_at + nargs + 7) & ~(size_t)7;
    if (handle >= num_kernels) return reply_error("unknown kernel handle", NULL);
    if (values_at + 8 * (size_t)nargs > len) return reply_error("malformed RUN arguments", NULL);
    uint64_t *values = calloc(nargs ? nargs : 1, 8);
    void **args = calloc(nargs ? nargs : 1, sizeof(void *));
    for (uint32_t i = 0; i < nargs; i++) {
        memcpy(&values[i], payload + values_at + 8 * i, 8);
        if (payload[kinds_at + i] == 1) values[i] = (uint64_t)(uintptr_t)(arena + values[i]);
        args[i] = &values[i];
    }
    void *profile = NULL;
    uint64_t profile_bytes = 0;
    int rc = record_programs < 0
        ? spine_run_grid(kernels[handle], args, g[0], g[1], g[2], g[3])
        : spine_profile_run_grid(kernels[handle], args, g[0], g[1], g[2], g[3], record_programs, &profile,
                                 &profile_bytes);
    free(values);
    free(args);
    if (rc) {
        spine_profile_free(profile);
        return reply_error("grid launch failed", strerror(rc));
    }
    char message[1024];
    if (spine_take_assert_failure(message, sizeof message)) {
        spine_profile_free(profile);
        reply(STATUS_ASSERTION, message, (uint32_t)strlen(message));
        return;
    }
    if (record_programs >= 0 && !profile) return reply_error("profile block", "out of memory");
    reply(0, profile, (uint32_t)profile_bytes);
    spine_profile_free(profile);
}

static void handle_run_profiled(uint8_t *payload, uint32_t len) {
    if (len < 4) return reply_error("malformed RUN_PROFILED", NULL);
    int32_t record_programs;
    memcpy(&record_programs, payload, 4);
    handle_run(payload + 4, len - 4, record_programs != 0);
}

static void handle_counter(void) {
    uint64_t ticks;
    int64_t monotonic;
    double hz = spine_profile_calibrate(20, &ticks, &monotonic);
    const char *name = spine_profile_counter_name();
    uint8_t out[24 + 64];
    size_t n = strlen(name) < 64 ? strlen(name) : 64;
    memcpy(out, &hz, 8);
    memcpy(out + 8, &ticks, 8);
    memcpy(out + 16, &monotonic, 8);
    memcpy(out + 24, name, n);
    reply(0, out, (uint32_t)(24 + n));
}

static void *watch_lifeline(void *arg) {
    struct pollfd p = {.fd = (int)(intptr_t)arg, .events = POLLIN};
    while (poll(&p, 1, -1) < 0) {}
    _exit(0);  /* the host process is gone */
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: %s <arena fd> <arena bytes> <request fd> <reply fd> <lifeline fd>\n", argv[0]);
        return 2;
    }
    request_fd = atoi(argv[3]);
    reply_fd = atoi(argv[4]);
    pthread_t watcher;
    if (pthread_create(&watcher, NULL, watch_lifeline, (void *)(intptr_t)atoi(argv[5]))) return 2;
    size_t size = strtoull(argv[2], NULL, 10);
    int fd = atoi(argv[1]);
    arena = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (arena == MAP_FAILED) { perror("mmap arena"); return 2; }
    close(fd);
    /* Kernels call libm for math without a vector lowering (expf, erff); they are linked without a
     * sysroot, so make libm's symbols global for them to bind to. */
    if (!dlopen("libm.so.6", RTLD_NOW | RTLD_GLOBAL)) fprintf(stderr, "warning: %s\n", dlerror());
    spine_grid_set_spin(0);  /* this server runs under QEMU: see grid.h */
    spine_fault_report_on_exit();  /* the host names the faulting kernel code, then starts a new server */
    uint32_t cores = (uint32_t)spine_num_cores();
    reply(0, &cores, 4);  /* ready */
    for (;;) {
        uint32_t header[2];
        if (read_full(header, 8)) return 0;  /* host closed the pipe */
        uint8_t *payload = malloc((size_t)header[1] + 1);
        if (!payload || read_full(payload, header[1])) return 0;
        switch (header[0]) {
        case CMD_LOAD: handle_load((char *)payload, header[1]); break;
        case CMD_RUN: handle_run(payload, header[1], -1); break;
        case CMD_RUN_PROFILED: handle_run_profiled(payload, header[1]); break;
        case CMD_COUNTER: handle_counter(); break;
        case CMD_PING: reply(0, NULL, 0); break;
        default: reply_error("unknown command", NULL);
        }
        free(payload);
    }
}
