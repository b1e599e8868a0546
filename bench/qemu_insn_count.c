/* A QEMU TCG plugin that counts every guest instruction a user-mode process executes and writes the total to
 * PREFIX.<QEMU's process id> when the process exits: `qemu-riscv64 -plugin ./qemu_insn_count.so,out=PREFIX
 * prog ...` (a file per process: a caller that starts several, as Spine's executor may, adds them up).
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
void qemu_plugin_register_atexit_cb(qemu_plugin_id_t id, qemu_plugin_udata_cb_t cb, void *userdata);

__attribute__((visibility("default"))) int qemu_plugin_version = 1;

static uint64_t executed;
static char out_path[4200];

static void on_translate(qemu_plugin_id_t id, struct qemu_plugin_tb *tb) {
    (void)id;
    qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64, &executed,
                                             qemu_plugin_tb_n_insns(tb));
}

/* Written whole to a temporary name, then renamed: a reader never sees a partial count. */
static void at_exit(qemu_plugin_id_t id, void *userdata) {
    (void)id;
    (void)userdata;
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
    for (int i = 0; i < argc; i++)
        if (strncmp(argv[i], "out=", 4) == 0)
            snprintf(out_path, sizeof out_path, "%.4096s.%ld", argv[i] + 4, (long)getpid());
    if (!out_path[0]) {
        fprintf(stderr, "qemu_insn_count: no out=PATH argument\n");
        return -1;
    }
    qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
    qemu_plugin_register_atexit_cb(id, at_exit, NULL);
    return 0;
}
