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
 * A kernel that faults kills this process; the host sees the pipe close and starts a new server.
 *
 * Stream mode, for a board reached over one byte stream (ssh): spine-kernel-server --stream <directory>
 * Requests arrive on stdin and replies leave on stdout (what kernels print goes to stderr); the arena is
 * this process's own memory, which the host fills and reads back by command; kernel files arrive by PUT
 * into <directory>, the working directory, and LOAD names them there. The stream ending (stdin closes)
 * ends the server, even in the middle of a kernel. Its own commands:
 *   PUT   payload: u32 name length, file name, the file's bytes (written whole under that name)
 *   HAVE  payload: file name; response payload: u8 1 if that file is there, else 0
 *   WRITE payload: u64 arena offset, bytes to copy there (the arena grows as needed)
 *   READ  payload: u64 arena offset, u64 length; response payload: those arena bytes */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
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
enum { CMD_PUT = 6, CMD_HAVE = 7, CMD_WRITE = 8, CMD_READ = 9 };  /* stream mode */
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

/* Stream mode: its arena is this process's own memory (in QEMU mode the host maps the arena). */
static int stream_mode;
static size_t own_arena_bytes;

static int grow_own_arena(uint64_t needed) {
    if (needed <= own_arena_bytes) return 0;
    size_t size = own_arena_bytes ? own_arena_bytes : (size_t)1 << 20;
    while (size < needed) size *= 2;
    uint8_t *bigger = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (bigger == MAP_FAILED) return -1;
    if (own_arena_bytes) {
        memcpy(bigger, arena, own_arena_bytes);
        munmap(arena, own_arena_bytes);
    }
    arena = bigger;
    own_arena_bytes = size;
    return 0;
}

/* Takes `len` bytes off the stream unread (a refused request's payload); -1 when the stream ended. */
static int skip_bytes(uint32_t len) {
    uint8_t sink[4096];
    for (uint32_t n; len; len -= n) {
        n = len < sizeof sink ? len : (uint32_t)sizeof sink;
        if (read_full(sink, n)) return -1;
    }
    return 0;
}

/* WRITE, read from the stream straight into the arena; -1 when the stream ended. */
static int receive_write(uint32_t len) {
    uint64_t offset;
    if (len < 8) {
        if (skip_bytes(len)) return -1;
        reply_error("malformed WRITE", NULL);
        return 0;
    }
    if (read_full(&offset, 8)) return -1;
    len -= 8;
    if (grow_own_arena(offset + len)) {
        if (skip_bytes(len)) return -1;
        reply_error("WRITE", "out of memory");
        return 0;
    }
    if (read_full(arena + offset, len)) return -1;
    reply(0, NULL, 0);
    return 0;
}

static void handle_read(uint8_t *payload, uint32_t len) {
    uint64_t at[2];
    if (!stream_mode) return reply_error("READ", "stream mode only");
    if (len != 16) return reply_error("malformed READ", NULL);
    memcpy(at, payload, 16);
    if (at[0] + at[1] > own_arena_bytes || at[1] > UINT32_MAX) return reply_error("READ", "outside the arena");
    reply(0, arena + at[0], (uint32_t)at[1]);
}

/* A plain file name: no directories, nothing hidden. */
static int plain_name(const char *name) { return name[0] && name[0] != '.' && !strchr(name, '/'); }

static void handle_put(uint8_t *payload, uint32_t len) {
    uint32_t name_len;
    char name[256], part[300];
    if (!stream_mode) return reply_error("PUT", "stream mode only");
    if (len < 4) return reply_error("malformed PUT", NULL);
    memcpy(&name_len, payload, 4);
    if (name_len == 0 || name_len >= sizeof name || 4 + (uint64_t)name_len > len)
        return reply_error("malformed PUT", NULL);
    memcpy(name, payload + 4, name_len);
    name[name_len] = 0;
    if (!plain_name(name)) return reply_error("PUT: not a plain file name", name);
    snprintf(part, sizeof part, ".%s.part-%d", name, (int)getpid());
    int fd = open(part, O_WRONLY | O_CREAT | O_TRUNC, 0755);
    if (fd < 0) return reply_error("PUT: cannot create", strerror(errno));
    const uint8_t *p = payload + 4 + name_len;
    size_t left = len - 4 - name_len;
    while (left) {
        ssize_t w = write(fd, p, left);
        if (w <= 0) {
            close(fd);
            unlink(part);
            return reply_error("PUT: cannot write", strerror(errno));
        }
        p += w;
        left -= (size_t)w;
    }
    /* Whole or not at all: a file under its final name is always complete. */
    if (close(fd) || rename(part, name)) {
        unlink(part);
        return reply_error("PUT: cannot write", strerror(errno));
    }
    reply(0, NULL, 0);
}

static void handle_have(char *payload, uint32_t len) {
    payload[len] = 0;
    if (!stream_mode) return reply_error("HAVE", "stream mode only");
    uint8_t present = plain_name(payload) && access(payload, R_OK) == 0;
    reply(0, &present, 1);
}

static void *watch_stream(void *arg) {
    (void)arg;
    struct pollfd p = {.fd = 0, .events = 0};  /* only the stream's end: POLLHUP, POLLERR */
    while (poll(&p, 1, -1) < 0 || !(p.revents & (POLLHUP | POLLERR | POLLNVAL))) {}
    _exit(0);  /* the host, or the connection to it, is gone */
}

static int serve(void);

static int serve_stream(const char *directory) {
    if (chdir(directory)) {
        perror(directory);
        return 2;
    }
    request_fd = 0;
    reply_fd = dup(1);
    if (reply_fd < 0 || dup2(2, 1) < 0) {  /* stdout carries replies only: kernels print to stderr */
        perror("stream mode");
        return 2;
    }
    stream_mode = 1;
    pthread_t watcher;
    if (pthread_create(&watcher, NULL, watch_stream, NULL)) return 2;
    if (!dlopen("libm.so.6", RTLD_NOW | RTLD_GLOBAL)) fprintf(stderr, "warning: %s\n", dlerror());
    spine_fault_report_on_exit();
    uint32_t cores = (uint32_t)spine_num_cores();
    reply(0, &cores, 4);  /* ready */
    return serve();
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--stream") == 0) return serve_stream(argv[2]);
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
    return serve();
}

static int serve(void) {
    for (;;) {
        uint32_t header[2];
        if (read_full(header, 8)) return 0;  /* host closed the pipe */
        if (header[0] == CMD_WRITE && stream_mode) {
            if (receive_write(header[1])) return 0;
            continue;
        }
        uint8_t *payload = malloc((size_t)header[1] + 1);
        if (!payload || read_full(payload, header[1])) return 0;
        switch (header[0]) {
        case CMD_LOAD: handle_load((char *)payload, header[1]); break;
        case CMD_RUN: handle_run(payload, header[1], -1); break;
        case CMD_RUN_PROFILED: handle_run_profiled(payload, header[1]); break;
        case CMD_COUNTER: handle_counter(); break;
        case CMD_PING: reply(0, NULL, 0); break;
        case CMD_PUT: handle_put(payload, header[1]); break;
        case CMD_HAVE: handle_have((char *)payload, header[1]); break;
        case CMD_READ: handle_read(payload, header[1]); break;
        default: reply_error("unknown command", NULL);
        }
        free(payload);
    }
}
