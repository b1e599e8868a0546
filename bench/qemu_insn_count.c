/* A QEMU TCG plugin that counts every guest instruction a user-mode process executes and writes the total to
 * PREFIX.<QEMU's process id> when the process exits: `qemu-riscv64 -plugin ./qemu_insn_count.so,out=PREFIX
 * prog ...` (a file per process: a caller that starts several, as Spine's executor may, adds them up).
 *
 * With `words=1` it also writes PREFIX.<pid>.words: a line per translation block that ran, "COUNT WORD ...", the
 * times it ran and its instructions' words (the low 16 bits of a compressed one), all hexadecimal, from which
 * the caller estimates cycles with spine.count's cost table (spine/count/cycles.py).
 *
 * With `skip=FILE` (lines of "START END", hexadecimal guest addresses) a translation block that starts in one
 * of the ranges is not counted, nor is the two-instruction trampoline (`li a7, 139; ecall`) through which a
 * signal handler returns: a program whose matrix instructions trap into an emulating handler
 * (cpp/matrix_emulation.c) is counted without the emulation, each trapped instruction once.
 *
 * Why a plugin: QEMU's execution log (spine.count's counter) writes a line per instruction and reaches a few
 * hundred thousand instructions a second, too slow for a program that first loads a model; the plugin adds
 * each translation block's length to a counter as the block runs, inline, at QEMU's own speed. Both count
 * the same thing, guest instructions retired (bench/riscv64_icount.py checks them against each other).
 *
 * The declarations below are the few parts of QEMU's plugin API (include/qemu/qemu-plugin.h, API version 1,
 * as QEMU 7.2 has it) this plugin calls, written out because Debian ships QEMU without the header. Counting
 * is exact for one guest thread: the inline add is not atomic between vCPUs, so the callers run every
 * counted process on one thread. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef uint64_t qemu_plugin_id_t;
struct qemu_plugin_tb;
typedef struct qemu_info_t qemu_info_t;
enum qemu_plugin_op { QEMU_PLUGIN_INLINE_ADD_U64 };
typedef void (*qemu_plugin_vcpu_tb_trans_cb_t)(qemu_plugin_id_t id, struct qemu_plugin_tb *tb);
typedef void (*qemu_plugin_udata_cb_t)(qemu_plugin_id_t id, void *userdata);

void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id, qemu_plugin_vcpu_tb_trans_cb_t cb);
void qemu_plugin_register_vcpu_tb_exec_inline(struct qemu_plugin_tb *tb, enum qemu_plugin_op op, void *ptr,
                                              uint64_t imm);
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb);
uint64_t qemu_plugin_tb_vaddr(const struct qemu_plugin_tb *tb);
struct qemu_plugin_insn *qemu_plugin_tb_get_insn(const struct qemu_plugin_tb *tb, size_t idx);
const void *qemu_plugin_insn_data(const struct qemu_plugin_insn *insn);
size_t qemu_plugin_insn_size(const struct qemu_plugin_insn *insn);
void qemu_plugin_register_atexit_cb(qemu_plugin_id_t id, qemu_plugin_udata_cb_t cb, void *userdata);

__attribute__((visibility("default"))) int qemu_plugin_version = 1;

static uint64_t executed;
static char out_path[4200];

#define MAX_SKIPPED 256
static uint64_t skipped[MAX_SKIPPED][2];
static int n_skipped;

/* The instruction's word, or a compressed one's 16 bits. */
static uint32_t word(const struct qemu_plugin_tb *tb, size_t idx) {
    const struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, idx);
    uint32_t w = 0;
    size_t size = qemu_plugin_insn_size(insn);
    memcpy(&w, qemu_plugin_insn_data(insn), size < 4 ? size : 4);
    return w;
}

/* words=1: every counted translation block, how often it ran and its instructions (one list: the counting
 * runs one guest thread) */
struct block {
    struct block *next;
    uint64_t count;
    size_t n;
    uint32_t words[];
};
static struct block *blocks;
static int record_words;

static void record(struct qemu_plugin_tb *tb) {
    size_t n = qemu_plugin_tb_n_insns(tb);
    struct block *b = malloc(sizeof *b + n * sizeof(uint32_t));
    if (!b) return;
    b->next = blocks;
    b->count = 0;
    b->n = n;
    for (size_t i = 0; i < n; i++) b->words[i] = word(tb, i);
    blocks = b;
    qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64, &b->count, 1);
}

/* The trampoline a signal handler returns through (musl's __restore_rt, or the one QEMU writes where the C
 * library gives none): li a7, 139 (rt_sigreturn); ecall. */
static int is_sigreturn(const struct qemu_plugin_tb *tb) {
    return qemu_plugin_tb_n_insns(tb) == 2 && word(tb, 0) == 0x08b00893u && word(tb, 1) == 0x00000073u;
}

static int is_skipped(const struct qemu_plugin_tb *tb) {
    uint64_t pc = qemu_plugin_tb_vaddr(tb);
    for (int i = 0; i < n_skipped; i++)
        if (pc >= skipped[i][0] && pc < skipped[i][1]) return 1;
    return n_skipped > 0 && is_sigreturn(tb);
}

static void on_translate(qemu_plugin_id_t id, struct qemu_plugin_tb *tb) {
    (void)id;
    if (is_skipped(tb)) return;
    qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64, &executed,
                                             qemu_plugin_tb_n_insns(tb));
    if (record_words) record(tb);
}

static int read_skipped(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    unsigned long long start, end;
    while (n_skipped < MAX_SKIPPED && fscanf(f, "%llx %llx", &start, &end) == 2) {
        skipped[n_skipped][0] = start;
        skipped[n_skipped][1] = end;
        n_skipped++;
    }
    int complete = feof(f);
    fclose(f);
    return complete ? 0 : -1;
}

static void write_words(void) {
    char path[4300], tmp[4400];
    snprintf(path, sizeof path, "%s.words", out_path);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return;
    for (const struct block *b = blocks; b; b = b->next) {
        if (!b->count) continue;
        fprintf(f, "%llx", (unsigned long long)b->count);
        for (size_t i = 0; i < b->n; i++) fprintf(f, " %x", b->words[i]);
        fputc('\n', f);
    }
    if (fclose(f) == 0) rename(tmp, path);
}

/* Written whole to a temporary name, then renamed: a reader never sees a partial count. The words first:
 * a caller that sees the count sees them too. */
static void at_exit(qemu_plugin_id_t id, void *userdata) {
    (void)id;
    (void)userdata;
    if (record_words) write_words();
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%s.tmp", out_path);
    FILE *f = fopen(tmp, "w");
    if (!f) return;
    fprintf(f, "%llu\n", (unsigned long long)executed);
    if (fclose(f) == 0) rename(tmp, out_path);
}

__attribute__((visibility("default"))) int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info,
                                                               int argc, char **argv) {
    (void)info;
    for (int i = 0; i < argc; i++) {
        if (strncmp(argv[i], "out=", 4) == 0)
            snprintf(out_path, sizeof out_path, "%.4096s.%ld", argv[i] + 4, (long)getpid());
        if (strcmp(argv[i], "words=1") == 0) record_words = 1;
        if (strncmp(argv[i], "skip=", 5) == 0 && read_skipped(argv[i] + 5) != 0) {
            fprintf(stderr, "qemu_insn_count: cannot read the ranges in %s (at most %d)\n", argv[i] + 5,
                    MAX_SKIPPED);
            return -1;
        }
    }
    if (!out_path[0]) {
        fprintf(stderr, "qemu_insn_count: no out=PATH argument\n");
        return -1;
    }
    qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
    qemu_plugin_register_atexit_cb(id, at_exit, NULL);
    return 0;
}
