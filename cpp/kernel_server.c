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
 *   hello    = the server's first response, unasked: status 0, payload u32 core count, u32 zero, u64 the
 *              address the arena is mapped at here (the host writes guest addresses into tables of them)
 *   request  = u32 command, u32 payload length, payload
 *   response = i32 status,  u32 payload length, payload   (status 0: success, 1: error, with its message,
 *              2: device assertion failed, with its message, 3: the kernel table is full, with a message)
 *   LOAD payload: path of a .so (host and guest share the filesystem); response payload: u32 handle,
 *                 u64 start and end of the kernel's executable code (for instruction tracing). Loading
 *                 the same entry point again answers its first handle. A full table (status 3) is
 *                 recovered from by starting a new server: handles are valid for one server's life.
 *   RUN  payload: u32 handle, i32 gx, gy, gz, i32 threads, u32 nargs, u8 kind[nargs] (1: arena offset),
 *                 padding to 8 bytes, u64 value[nargs]
 *   RUN_PROFILED payload: u32 record_programs, then a RUN payload; response payload: the launch's profile
 *                 block (profile_buffers.h: header, records, scope names)
 *   COUNTER      response payload: f64 counter frequency (Hz), u64 counter ticks and i64 CLOCK_MONOTONIC ns
 *                 read together, then the counter's name (profile_buffers.h)
 * A kernel that faults kills this process; the host sees the pipe close and starts a new server.
 * Any other bad request (a lying length, an offset outside the arena, an unknown command or handle) is
 * answered with status 1 and the stream stays in step: a refused payload is read and dropped after the
 * answer. Error messages are shorter than 1 KiB, which lets the host bound what it reads.
 *
 * Stream mode, for a board reached over one byte stream (ssh): spine-kernel-server --stream <directory>
 * Requests arrive on stdin and replies leave on stdout (what kernels print goes to stderr); the arena is
 * this process's own memory, which the host fills and reads back by command; kernel files arrive by PUT
 * into <directory>, the working directory, and LOAD names them there. The stream ending (stdin closes)
 * ends the server, even in the middle of a kernel. Its own commands:
 *   PUT   payload: u32 name length, file name, the file's bytes (written whole under that name)
 *   HAVE  payload: the file's SHA-256 (32 bytes), then its name; response payload: u8 1 if a file of that
 *         name and content is there, else 0
 *   WRITE payload: u64 arena offset, bytes to copy there (the arena grows as needed, up to MAX_OWN_ARENA)
 *   READ  payload: u64 arena offset, u64 length; response payload: those arena bytes
 *
 * `--kernel-slots N` before the other arguments (1 to 4096, default 4096; the host passes its
 * SPINE_SERVER_KERNEL_SLOTS) shrinks the kernel table, so that tests reach a full table with a few kernels. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <link.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core_placement.h"
#include "device_io.h"
#include "fault_guard.h"
#include "grid.h"
#include "matrix_emulation.h"
#include "profile_buffers.h"

enum { CMD_LOAD = 1, CMD_RUN = 2, CMD_PING = 3, CMD_RUN_PROFILED = 4, CMD_COUNTER = 5 };
enum { CMD_PUT = 6, CMD_HAVE = 7, CMD_WRITE = 8, CMD_READ = 9 };  /* stream mode */
enum { STATUS_ERROR = 1, STATUS_ASSERTION = 2, STATUS_TABLE_FULL = 3 };
#define MAX_KERNELS 4096
#define MAX_THREADS 4096
#define MAX_ARGS 65536
/* A kernel file's size bounds PUT; nothing else sends more than a path or a RUN's arguments. */
#define MAX_PUT_BYTES ((uint32_t)1 << 28)
#define MAX_RUN_BYTES (32u + 9u * MAX_ARGS)
/* Stream mode's own arena: a power of two, and within a riscv64 Sv39 process's address space. */
#define MAX_OWN_ARENA ((uint64_t)1 << 36)

static spine_entry_fn kernels[MAX_KERNELS];
static uint32_t num_kernels, kernel_slots = MAX_KERNELS;
static uint8_t *arena;
static uint64_t arena_bytes;  /* QEMU mode: the host's mapping; stream mode: the arena grown so far */
/* The protocol has pipes of its own, so whatever kernels or libraries print to stdout reaches the user's
 * terminal instead of corrupting replies. */
static int request_fd = -1, reply_fd = -1;
static int stream_mode;

static int read_full(void *buf, size_t n) {
    uint8_t *p = buf;
    while (n) {
        ssize_t r = read(request_fd, p, n);
        if (r < 0 && errno == EINTR) continue;
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
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && errno == EPIPE) exit(0);  /* the host is gone, as when it closes the request stream */
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

static void reply_status(int32_t status, const char *what, const char *detail) {
    char msg[1024];
    int n = snprintf(msg, sizeof msg, "%s: %s", what, detail ? detail : "");
    reply(status, msg, (uint32_t)(n < (int)sizeof msg ? n : (int)sizeof msg - 1));
}

static void reply_error(const char *what, const char *detail) { reply_status(STATUS_ERROR, what, detail); }

/* Takes `len` bytes off the stream unread (a refused request's payload); -1 when the stream ended. The
 * refusal is answered first: a sender whose length lies hears why at once, and one that sends the bytes
 * stays in step. */
static int skip_bytes(uint64_t len) {
    uint8_t sink[4096];
    for (size_t n; len; len -= n) {
        n = len < sizeof sink ? (size_t)len : sizeof sink;
        if (read_full(sink, n)) return -1;
    }
    return 0;
}

/* -- SHA-256 (FIPS 180-4): HAVE trusts a file only when its content is the one asked for. Boards have no
 * hashing library this server could link to without a sysroot, so it carries its own. */

typedef struct {
    uint32_t h[8];
    uint64_t bytes;
    uint8_t block[64];
} sha256_t;

static const uint32_t SHA256_K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

static uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

static void sha256_block(sha256_t *s, const uint8_t *p) {
    uint32_t w[64], v[8];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    memcpy(v, s->h, sizeof v);
    for (int i = 0; i < 64; i++) {
        uint32_t t1 = v[7] + (rotr(v[4], 6) ^ rotr(v[4], 11) ^ rotr(v[4], 25)) + ((v[4] & v[5]) ^ (~v[4] & v[6]))
                      + SHA256_K[i] + w[i];
        uint32_t t2 = (rotr(v[0], 2) ^ rotr(v[0], 13) ^ rotr(v[0], 22)) + ((v[0] & v[1]) ^ (v[0] & v[2]) ^ (v[1] & v[2]));
        memmove(v + 1, v, 7 * sizeof *v);
        v[4] += t1;
        v[0] = t1 + t2;
    }
    for (int i = 0; i < 8; i++) s->h[i] += v[i];
}

static void sha256_init(sha256_t *s) {
    static const uint32_t h0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(s->h, h0, sizeof h0);
    s->bytes = 0;
}

static void sha256_update(sha256_t *s, const uint8_t *p, size_t n) {
    while (n) {
        size_t fill = s->bytes % 64, take = 64 - fill < n ? 64 - fill : n;
        memcpy(s->block + fill, p, take);
        s->bytes += take;
        p += take;
        n -= take;
        if (s->bytes % 64 == 0) sha256_block(s, s->block);
    }
}

static void sha256_final(sha256_t *s, uint8_t out[32]) {
    uint64_t bits = s->bytes * 8;
    uint8_t pad[72] = {0x80}, length[8];
    for (int i = 0; i < 8; i++) length[i] = (uint8_t)(bits >> (56 - 8 * i));
    sha256_update(s, pad, (size_t)(119 - s->bytes % 64) % 64 + 1);
    sha256_update(s, length, 8);
    for (int i = 0; i < 32; i++) out[i] = (uint8_t)(s->h[i / 4] >> (24 - 8 * (i % 4)));
}

/* 0 and the file's hash in `out`; -1 when it cannot be read. */
static int sha256_file(const char *name, uint8_t out[32]) {
    int fd = open(name, O_RDONLY);
    if (fd < 0) return -1;
    sha256_t s;
    sha256_init(&s);
    uint8_t buf[1 << 14];
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0) sha256_update(&s, buf, (size_t)n);
    close(fd);
    if (n < 0) return -1;
    sha256_final(&s, out);
    return 0;
}

/* -- LOAD ---------------------------------------------------------------------------------------------- */

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

/* A plain file name: no directories, nothing hidden. */
static int plain_name(const char *name) { return name[0] && name[0] != '.' && !strchr(name, '/'); }

/* The payload as a C string: it must be `len` bytes with no NUL inside. */
static const char *as_string(uint8_t *payload, uint32_t len) {
    payload[len] = 0;
    return len && strlen((char *)payload) == len ? (char *)payload : NULL;
}

static int32_t find_kernel(spine_entry_fn fn) {
    for (uint32_t i = 0; i < num_kernels; i++)
        if (kernels[i] == fn) return (int32_t)i;
    return -1;
}

static void handle_load(uint8_t *payload, uint32_t len) {
    const char *path = as_string(payload, len);
    if (!path || len >= PATH_MAX) return reply_error("malformed LOAD", "expected a file path");
    /* On a board, kernels are the files PUT into the server's directory, and nothing else. */
    if (stream_mode && !plain_name(strncmp(path, "./", 2) ? path : path + 2))
        return reply_error("LOAD: not a file in the server's directory", path);
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) return reply_error("dlopen failed", dlerror());
    spine_entry_fn fn = (spine_entry_fn)dlsym(lib, "spine_entry");
    if (!fn) {
        reply_error("entry point missing", dlerror());
        dlclose(lib);
        return;
    }
    char placement_error[512];
    if (spine_place_for_kernel(lib, placement_error, sizeof placement_error)) {
        dlclose(lib);
        return reply_error("LOAD: no core here runs this kernel", placement_error);
    }
    int32_t found = find_kernel(fn);
    if (found >= 0) {
        dlclose(lib);  /* loaded before: the first handle's reference keeps it */
    } else if (num_kernels >= kernel_slots) {
        dlclose(lib);
        char count[32];
        snprintf(count, sizeof count, "%u kernels loaded", num_kernels);
        return reply_status(STATUS_TABLE_FULL, "the kernel table is full", count);
    } else {
        found = (int32_t)num_kernels;
        kernels[num_kernels++] = fn;
    }
    uint32_t handle = (uint32_t)found;
    /* The kernel's executable range lets the host attribute traced guest instructions to it. */
    struct text_range range = {0, 0, 0};
    Dl_info info;
    if (dladdr((void *)fn, &info)) {
        range.base = (uintptr_t)info.dli_fbase;
        dl_iterate_phdr(find_text, &range);
    }
    uint8_t out[20];
    memcpy(out, &handle, 4);
    memcpy(out + 4, &range.lo, 8);
    memcpy(out + 12, &range.hi, 8);
    reply(0, out, sizeof out);
}

/* -- RUN ----------------------------------------------------------------------------------------------- */

/* NULL when the grid and thread count can run, else what is wrong with them. */
static const char *bad_grid(const int32_t g[4]) {
    if (g[0] < 0 || g[1] < 0 || g[2] < 0) return "a negative grid dimension";
    if (g[3] < 0 || g[3] > MAX_THREADS) return "a thread count outside 0 to 4096";
    int64_t programs;
    if (__builtin_mul_overflow((int64_t)g[0] * g[1], (int64_t)g[2], &programs)) return "too many programs";
    return NULL;
}

/* Reads a RUN's arguments into `values` (arena offsets made addresses); NULL, or what is wrong. Every
 * pointer handed to a kernel lies in [arena, arena + arena bytes]: the end itself is a zero-byte view's
 * place, as a C pointer may point one past an array. */
static const char *decode_arguments(const uint8_t *kinds, const uint8_t *slots, uint32_t nargs, uint64_t *values,
                                    char *why, size_t why_size) {
    for (uint32_t i = 0; i < nargs; i++) {
        memcpy(&values[i], slots + 8 * (size_t)i, 8);
        if (kinds[i] > 1) {
            snprintf(why, why_size, "argument %u has an unknown kind %u", i, kinds[i]);
            return why;
        }
        if (kinds[i] == 1) {
            if (values[i] > arena_bytes) {
                snprintf(why, why_size, "argument %u (arena offset %llu) is outside the arena (%llu bytes)", i,
                         (unsigned long long)values[i], (unsigned long long)arena_bytes);
                return why;
            }
            values[i] = (uint64_t)(uintptr_t)(arena + values[i]);
        }
    }
    return NULL;
}

/* record_programs < 0: an ordinary launch; else a profiled one, whose records are the reply. */
/* The grid runtime's own failures are negative (grid.h); positive ones are errno values. */
static const char *grid_failure(int rc) {
    switch (rc) {
    case SPINE_GRID_TOO_LARGE: return "the grid has more programs than a launch can count (2^62)";
    case SPINE_GRID_POISONED: return "an earlier stop may have left locks held: restart the process";
    default: return rc > 0 ? strerror(rc) : "the grid runtime refused the launch";
    }
}

static void handle_run(uint8_t *payload, uint32_t len, int32_t record_programs) {
    if (len < 24) return reply_error("malformed RUN", "shorter than its fixed fields");
    uint32_t handle, nargs;
    int32_t g[4];
    memcpy(&handle, payload, 4);
    memcpy(g, payload + 4, 16);
    memcpy(&nargs, payload + 20, 4);
    if (handle >= num_kernels) return reply_error("RUN", "unknown kernel handle");
    const char *wrong = bad_grid(g);
    if (wrong) return reply_error("RUN", wrong);
    uint64_t kinds_at = 24, values_at = (kinds_at + nargs + 7) & ~(uint64_t)7;
    if (nargs > MAX_ARGS || values_at + 8 * (uint64_t)nargs != len)
        return reply_error("malformed RUN", "the argument count does not match the payload's length");
    uint64_t *values = calloc(nargs ? nargs : 1, 8);
    void **args = calloc(nargs ? nargs : 1, sizeof(void *));
    char why[160];
    wrong = values && args ? decode_arguments(payload + kinds_at, payload + values_at, nargs, values, why, sizeof why)
                           : "out of memory";
    if (wrong) {
        free(values);
        free(args);
        return reply_error("RUN", wrong);
    }
    for (uint32_t i = 0; i < nargs; i++) args[i] = &values[i];
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
        return reply_error("grid launch failed", grid_failure(rc));
    }
    char message[1024];
    if (spine_take_assert_failure(message, sizeof message)) {
        spine_profile_free(profile);
        reply(STATUS_ASSERTION, message, (uint32_t)strnlen(message, sizeof message - 1));
        return;
    }
    if (record_programs >= 0 && !profile) return reply_error("profile block", "out of memory");
    if (profile_bytes > UINT32_MAX) {
        spine_profile_free(profile);
        return reply_error("profile block", "larger than a reply can carry (4 GiB)");
    }
    reply(0, profile, (uint32_t)profile_bytes);
    spine_profile_free(profile);
}

static void handle_run_profiled(uint8_t *payload, uint32_t len) {
    if (len < 4) return reply_error("malformed RUN_PROFILED", "shorter than its fixed fields");
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

/* -- stream mode: its arena is this process's own memory (in QEMU mode the host maps the arena) ---------- */

static int grow_own_arena(uint64_t needed) {
    if (needed <= arena_bytes) return 0;
    if (needed > MAX_OWN_ARENA) return -1;
    uint64_t size = arena_bytes ? arena_bytes : (uint64_t)1 << 20;
    while (size < needed) size *= 2;  /* ends: needed <= MAX_OWN_ARENA, a power of two */
    uint8_t *bigger = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (bigger == MAP_FAILED) return -1;
    if (arena_bytes) {
        memcpy(bigger, arena, (size_t)arena_bytes);
        munmap(arena, (size_t)arena_bytes);
    }
    arena = bigger;
    arena_bytes = size;
    return 0;
}

/* WRITE, read from the stream straight into the arena; -1 when the stream ended. */
static int receive_write(uint32_t len) {
    uint64_t offset;
    if (len < 8) {
        reply_error("malformed WRITE", "shorter than its offset");
        return skip_bytes(len);
    }
    if (read_full(&offset, 8)) return -1;
    len -= 8;
    const char *refused = offset > MAX_OWN_ARENA || len > MAX_OWN_ARENA - offset
                              ? "beyond the largest arena (64 GiB)"
                              : grow_own_arena(offset + len) ? "out of memory" : NULL;
    if (refused) {
        reply_error("WRITE", refused);
        return skip_bytes(len);
    }
    if (read_full(arena + offset, len)) return -1;
    reply(0, NULL, 0);
    return 0;
}

static void handle_read(uint8_t *payload, uint32_t len) {
    uint64_t at[2];
    if (len != 16) return reply_error("malformed READ", "expected an offset and a length");
    memcpy(at, payload, 16);
    if (at[1] > UINT32_MAX || at[0] > arena_bytes || at[1] > arena_bytes - at[0])
        return reply_error("READ", "outside the arena");
    reply(0, arena + at[0], (uint32_t)at[1]);
}

static void handle_put(uint8_t *payload, uint32_t len) {
    uint32_t name_len;
    char name[256], part[300];
    if (len < 4) return reply_error("malformed PUT", "shorter than its name length");
    memcpy(&name_len, payload, 4);
    if (name_len == 0 || name_len >= sizeof name || 4 + (uint64_t)name_len > len)
        return reply_error("malformed PUT", "a name length that does not fit");
    memcpy(name, payload + 4, name_len);
    name[name_len] = 0;
    if (strlen(name) != name_len || !plain_name(name)) return reply_error("PUT: not a plain file name", name);
    snprintf(part, sizeof part, ".%s.part-%d", name, (int)getpid());
    int fd = open(part, O_WRONLY | O_CREAT | O_TRUNC, 0755);
    if (fd < 0) return reply_error("PUT: cannot create", strerror(errno));
    const uint8_t *p = payload + 4 + name_len;
    size_t left = len - 4 - name_len;
    while (left) {
        ssize_t w = write(fd, p, left);
        if (w <= 0) {
            int error = w < 0 ? errno : ENOSPC;
            close(fd);
            unlink(part);
            return reply_error("PUT: cannot write", strerror(error));
        }
        p += w;
        left -= (size_t)w;
    }
    /* Whole or not at all: a file under its final name is always complete. */
    if (close(fd) || rename(part, name)) {
        int error = errno;
        unlink(part);
        return reply_error("PUT: cannot write", strerror(error));
    }
    reply(0, NULL, 0);
}

/* A file under its final name may still be damaged (a disk that filled, a board that lost power before
 * the data reached it), so only its content, hashed here, says it is the one wanted. */
static void handle_have(uint8_t *payload, uint32_t len) {
    if (len <= 32) return reply_error("malformed HAVE", "expected a SHA-256 and a file name");
    const char *name = as_string(payload + 32, len - 32);
    if (!name || !plain_name(name)) return reply_error("HAVE: not a plain file name", name);
    uint8_t actual[32];
    uint8_t present = sha256_file(name, actual) == 0 && memcmp(actual, payload, 32) == 0;
    reply(0, &present, 1);
}

static void *watch_stream(void *arg) {
    (void)arg;
    struct pollfd p = {.fd = 0, .events = 0};  /* only the stream's end: POLLHUP, POLLERR */
    while (poll(&p, 1, -1) < 0 || !(p.revents & (POLLHUP | POLLERR | POLLNVAL))) {}
    _exit(0);  /* the host, or the connection to it, is gone */
}

static int serve(void);

/* Takes a leading `--kernel-slots N` off the arguments; -1 when N is not a count of 1 to MAX_KERNELS. */
static int take_kernel_slots(int *argc, char ***argv) {
    if (*argc < 3 || strcmp((*argv)[1], "--kernel-slots") != 0) return 0;
    char *end;
    long slots = strtol((*argv)[2], &end, 10);
    if (*end || end == (*argv)[2] || slots < 1 || slots > MAX_KERNELS) return -1;
    kernel_slots = (uint32_t)slots;
    (*argv)[2] = (*argv)[0];
    *argv += 2;
    *argc -= 2;
    return 0;
}

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
    if (spine_matrix_emulation_enable()) spine_fault_guard_emulate_with(spine_matrix_emulate);
    uint32_t cores = (uint32_t)spine_num_cores();
    reply(0, &cores, 4);  /* ready */
    return serve();
}

int main(int argc, char **argv) {
    signal(SIGPIPE, SIG_IGN);  /* a reply to a host that is gone ends this server quietly (write_full) */
    int bad_slots = take_kernel_slots(&argc, &argv);
    if (!bad_slots && argc == 3 && strcmp(argv[1], "--stream") == 0) return serve_stream(argv[2]);
    if (bad_slots || argc != 6) {
        fprintf(stderr, "usage: %s [--kernel-slots 1..%d] <arena fd> <arena bytes> <request fd> <reply fd> "
                "<lifeline fd>\n   or: %s [--kernel-slots 1..%d] --stream <directory>\n", argv[0], MAX_KERNELS,
                argv[0], MAX_KERNELS);
        return 2;
    }
    request_fd = atoi(argv[3]);
    reply_fd = atoi(argv[4]);
    pthread_t watcher;
    if (pthread_create(&watcher, NULL, watch_lifeline, (void *)(intptr_t)atoi(argv[5]))) return 2;
    arena_bytes = strtoull(argv[2], NULL, 10);
    int fd = atoi(argv[1]);
    arena = mmap(NULL, (size_t)arena_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (arena == MAP_FAILED) { perror("mmap arena"); return 2; }
    close(fd);
    /* Kernels call libm for math without a vector lowering (expf, erff); they are linked without a
     * sysroot, so make libm's symbols global for them to bind to. */
    if (!dlopen("libm.so.6", RTLD_NOW | RTLD_GLOBAL)) fprintf(stderr, "warning: %s\n", dlerror());
    spine_grid_set_spin(0);  /* this server runs under QEMU: see grid.h */
    spine_fault_report_on_exit();  /* the host names the faulting kernel code, then starts a new server */
    if (spine_matrix_emulation_enable())   /* matrix-unit kernels under QEMU */
        spine_fault_guard_emulate_with(spine_matrix_emulate);
    struct { uint32_t cores, zero; uint64_t arena; } hello = {(uint32_t)spine_num_cores(), 0,
                                                              (uint64_t)(uintptr_t)arena};
    reply(0, &hello, sizeof hello);  /* ready */
    return serve();
}

/* NULL when a request of this command and payload length is served, else why it is refused. */
static const char *refusal(uint32_t command, uint32_t len) {
    int stream_only = command >= CMD_PUT && command <= CMD_READ;
    if (command < CMD_LOAD || command > CMD_READ) return "unknown command";
    if (stream_only && !stream_mode) return "stream mode only";
    uint32_t longest = command == CMD_LOAD ? PATH_MAX
                       : command == CMD_RUN || command == CMD_RUN_PROFILED ? MAX_RUN_BYTES
                       : command == CMD_PUT ? MAX_PUT_BYTES
                       : command == CMD_HAVE ? 32 + 256
                       : command == CMD_READ ? 16 : 0;
    return len > longest ? "request longer than its command allows" : NULL;
}

static void dispatch(uint32_t command, uint8_t *payload, uint32_t len) {
    switch (command) {
    case CMD_LOAD: return handle_load(payload, len);
    case CMD_RUN: return handle_run(payload, len, -1);
    case CMD_RUN_PROFILED: return handle_run_profiled(payload, len);
    case CMD_COUNTER: return handle_counter();
    case CMD_PING: return reply(0, NULL, 0);
    case CMD_PUT: return handle_put(payload, len);
    case CMD_HAVE: return handle_have(payload, len);
    case CMD_READ: return handle_read(payload, len);
    }
}

static int serve(void) {
    for (;;) {
        uint32_t header[2];
        if (read_full(header, 8)) return 0;  /* host closed the pipe */
        uint32_t command = header[0], len = header[1];
        if (command == CMD_WRITE && stream_mode) {
            if (receive_write(len)) return 0;
            continue;
        }
        const char *refused = refusal(command, len);
        uint8_t *payload = refused ? NULL : malloc((size_t)len + 1);
        if (!payload) {
            reply_error(refused ? refused : "request", refused ? NULL : "out of memory");
            if (skip_bytes(len)) return 0;
            continue;
        }
        if (read_full(payload, len)) return 0;  /* the stream ended inside a request */
        dispatch(command, payload, len);
        free(payload);
    }
}
