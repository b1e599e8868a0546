/* See fault_guard.h, whose header comment states what a stop guarantees. Written by hand because no library
 * offers it for C called from Python: the handler must be per thread (several grid threads run kernels at
 * once) and must chain to the handlers Python or the embedding program installed for signals that are not
 * ours.
 *
 * Chaining: for each signal we keep the actions ours displaced, oldest first: the one found at install, and
 * each one found later in front of ours (spine_fault_guard_check_handlers). A signal that is not ours goes
 * to the newest. A handler that chains on by itself calls what it displaced, which is ours: re-entered from
 * the handler we called, we go one further down. faulthandler chains by restoring its predecessor and
 * raising the signal again; our handlers are SA_NODEFER so that the raise arrives while we are still in the
 * handler we called, and is recognised the same way. */
#define _GNU_SOURCE
#include "fault_guard.h"

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>
#include <unistd.h>

#define FAULT_SIGNALS 4
static const int fault_signals[FAULT_SIGNALS] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL};
/* Chained signals: the fault signals, then these. */
#define INTERRUPT_INDEX FAULT_SIGNALS
#define SIGINT_INDEX (FAULT_SIGNALS + 1)
#define CHAINED (FAULT_SIGNALS + 2)
#define MAX_BELOW 4

typedef struct {
    int signal;
    struct sigaction mine;
    struct sigaction below[MAX_BELOW];   /* what ours displaced, oldest first */
    int depth;
} chain_t;

static chain_t chains[CHAINED];
static sigset_t handled;    /* the fault signals and the interrupt signal */
static pthread_once_t installed = PTHREAD_ONCE_INIT;

/* Initial-exec TLS: a signal handler must not call __tls_get_addr, which may allocate. */
#define TLS __thread __attribute__((tls_model("initial-exec")))
static TLS sigjmp_buf *volatile active_jump;
static TLS spine_fault_t *volatile active_fault;
static TLS int has_alt_stack;
/* Which of chains[i].below this thread is calling now, plus one (0: none). */
static TLS int chaining[CHAINED];
/* The last fault signal this thread chained whose handler returned leaving the pc as it was: the same
 * fault again at once means that handler does nothing for it (faulthandler once disabled), so the next one
 * down gets it rather than the fault repeating for ever. */
static TLS struct { int signal, level; uintptr_t pc, address; } returned;
/* The stop request this thread put off (outside kernel code), for its next safe point. */
static TLS uint64_t stop_pending;
static TLS int unstoppable;

/* Threads that have run guarded code, and how deep in it each is now, for spine_fault_guard_stop. The
 * threads that run kernels (the grid's and smt.parallel's pools, the launching threads) are few and live
 * long; a thread beyond the table's size runs unguarded by interrupts only. */
#define MAX_GUARDED_THREADS 1024
static pthread_t guarded_threads[MAX_GUARDED_THREADS];
static _Atomic int guarded_depth[MAX_GUARDED_THREADS];
static _Atomic int interrupts_sent[MAX_GUARDED_THREADS];
static _Atomic int num_guarded_threads;
static TLS int guard_slot = -1;

/* The running launch (launches are one at a time: the grid's pool lock), the code a stop may happen in,
 * and the stop asked for: (launch << 4) | (reason << 1) | force, 0 when none. */
static _Atomic uint64_t launch_number;
static _Atomic int launch_running;
static _Atomic uintptr_t kernel_lo, kernel_hi;
static _Atomic uint64_t stop_request;
static _Atomic int poisoned;
static void (*_Atomic sigint_notify)(void);
static int (*_Atomic emulator)(void *context);

static int interrupt_signal(void) { return SIGRTMIN + 6; }

static _Atomic int *this_thread_depth(void) {
    if (guard_slot < 0) {
        int slot = atomic_fetch_add(&num_guarded_threads, 1);
        if (slot >= MAX_GUARDED_THREADS) {
            atomic_store(&num_guarded_threads, MAX_GUARDED_THREADS);
            return NULL;
        }
        guarded_threads[slot] = pthread_self();
        guard_slot = slot;
    }
    return &guarded_depth[guard_slot];
}

static uintptr_t fault_pc(void *context) {
    ucontext_t *uc = context;
#if defined(__x86_64__)
    return (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
#elif defined(__riscv)
    return (uintptr_t)uc->uc_mcontext.__gregs[REG_PC];
#elif defined(__aarch64__)
    return (uintptr_t)uc->uc_mcontext.pc;
#else
    (void)uc;
    return 0;
#endif
}

/* Whether the faulting access was a store, where the CPU tells (x86's page-fault error code). */
static int fault_was_store(int sig, void *context) {
#if defined(__x86_64__)
    ucontext_t *uc = context;
    return sig == SIGSEGV && (uc->uc_mcontext.gregs[REG_ERR] & 2) != 0;
#else
    (void)sig; (void)context;
    return 0;
#endif
}

/* ------------------------------------------------------------------------------------------ chaining */

static void default_action(int sig, const siginfo_t *info) {
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, NULL);
    if (info->si_code > 0 && sig != SIGINT && sig != interrupt_signal()) return;  /* the CPU faults again */
    sigset_t just;
    sigemptyset(&just);
    sigaddset(&just, sig);
    pthread_sigmask(SIG_UNBLOCK, &just, NULL);
    raise(sig);
}

static int is_handler(const struct sigaction *a, void (*handler)(int)) {
    return !(a->sa_flags & SA_SIGINFO) && a->sa_handler == handler;
}

/* Passes a signal that is not ours on; returns whether a handler (not the default action, not "ignore")
 * took it. */
static int chain(int i, siginfo_t *info, void *context) {
    chain_t *c = &chains[i];
    int sig = c->signal;
    int cpu_fault = i < FAULT_SIGNALS && info->si_code > 0;
    uintptr_t pc = cpu_fault ? fault_pc(context) : 0, address = (uintptr_t)info->si_addr;
    int level = chaining[i] ? chaining[i] - 2 : c->depth - 1;
    if (cpu_fault && returned.signal == sig && returned.pc == pc && returned.address == address &&
        returned.level <= level)
        level = returned.level - 1;
    if (level < 0) {
        default_action(sig, info);
        return 0;
    }
    struct sigaction *old = &c->below[level];
    if (is_handler(old, SIG_IGN)) return 0;
    if (is_handler(old, SIG_DFL)) {
        default_action(sig, info);
        return 0;
    }
    int outer = chaining[i];
    chaining[i] = level + 1;
    if (old->sa_flags & SA_SIGINFO) old->sa_sigaction(sig, info, context);
    else old->sa_handler(sig);
    chaining[i] = outer;
    returned.signal = cpu_fault && fault_pc(context) == pc ? sig : 0;
    returned.level = level;
    returned.pc = pc;
    returned.address = address;
    return 1;
}

static int fault_index(int sig) {
    for (int i = 0; i < FAULT_SIGNALS; i++)
        if (fault_signals[i] == sig) return i;
    return 0;
}

/* ------------------------------------------------------------------------------------------ handlers */

static void leave_guard(sigjmp_buf *jump, int sig, int code, uintptr_t address, uintptr_t pc, int flags) {
    active_jump = NULL;
    spine_fault_t *fault = active_fault;
    fault->signal = sig;
    fault->code = code;
    fault->address = address;
    fault->pc = pc;
    fault->flags = flags;
    siglongjmp(*jump, 1);
}

/* Whether the illegal instruction was carried out by the emulator (spine_fault_guard_emulate_with). */
static int emulated(int sig, const siginfo_t *info, void *context) {
    int (*emulate)(void *) = atomic_load(&emulator);
    return sig == SIGILL && info->si_code > 0 && emulate && emulate(context);
}

static void on_fault(int sig, siginfo_t *info, void *context) {
    if (emulated(sig, info, context)) return;
    sigjmp_buf *jump = active_jump;
    /* Only a fault the CPU raised is the kernel's. A signal sent by a process is not, except one this
     * process raised on this very thread while it runs a kernel: a handler that ran ahead of ours
     * (installed since the last check) passing the kernel's fault on by raising it again. */
    int reraised = info->si_code == SI_TKILL && info->si_pid == getpid();
    if (!jump || !(info->si_code > 0 || reraised)) {
        int errno_saved = errno;
        chain(fault_index(sig), info, context);
        errno = errno_saved;
        return;
    }
    if (info->si_code > 0)
        leave_guard(jump, sig, info->si_code, (uintptr_t)info->si_addr, fault_pc(context),
                    fault_was_store(sig, context) ? SPINE_FAULT_STORE : 0);
    leave_guard(jump, sig, 0, 0, 0, SPINE_FAULT_RERAISED);
}

static uint64_t request_launch(uint64_t request) { return request >> 4; }
static int request_reason(uint64_t request) { return (int)(request >> 1) & 7; }

/* The stop request aimed at the launch running now, or 0. */
static uint64_t live_request(void) {
    uint64_t request = atomic_load(&stop_request);
    if (!request || request_launch(request) != atomic_load(&launch_number) || !atomic_load(&launch_running))
        return 0;
    return request;
}

static int stop_flags(uint64_t request) {
    return request_reason(request) == SPINE_STOP_INTERRUPT ? SPINE_FAULT_INTERRUPTED : 0;
}

static void on_interrupt(int sig, siginfo_t *info, void *context) {
    /* Ours: sent by spine_fault_guard_stop (tgkill from this process), which counts what it sends to each
     * thread; real-time signals queue, so each one it sent arrives once. */
    int ours = info->si_code == SI_TKILL && info->si_pid == getpid() && guard_slot >= 0 &&
               atomic_load(&interrupts_sent[guard_slot]) > 0;
    if (!ours) {
        int errno_saved = errno;
        chain(INTERRUPT_INDEX, info, context);
        errno = errno_saved;
        return;
    }
    (void)sig;
    atomic_fetch_sub(&interrupts_sent[guard_slot], 1);
    sigjmp_buf *jump = active_jump;
    uint64_t request = live_request();
    if (!jump || !request) return;   /* between guarded calls, or a stop meant for an earlier launch */
    uintptr_t pc = fault_pc(context);
    if (pc >= atomic_load(&kernel_lo) && pc < atomic_load(&kernel_hi))
        leave_guard(jump, SPINE_FAULT_STOPPED, 0, 0, pc, stop_flags(request));
    if (unstoppable || !(request & 1)) {
        stop_pending = request;   /* the next safe point, or the watchdog's next try */
        return;
    }
    atomic_store(&poisoned, 1);
    leave_guard(jump, SPINE_FAULT_STOPPED, 0, 0, pc, stop_flags(request) | SPINE_FAULT_OUTSIDE_KERNEL);
}

static void on_sigint(int sig, siginfo_t *info, void *context) {
    (void)sig;
    int errno_saved = errno;
    /* Python's handler only notes the signal; the launch must end before Python can act on it. */
    int taken = chain(SIGINT_INDEX, info, context);
    void (*notify)(void) = atomic_load(&sigint_notify);
    if (taken && notify && atomic_load(&launch_running)) notify();
    errno = errno_saved;
}

/* ------------------------------------------------------------------------------------------ installing */

static void (*handler_of(int i))(int, siginfo_t *, void *) {
    return i < FAULT_SIGNALS ? on_fault : i == INTERRUPT_INDEX ? on_interrupt : on_sigint;
}

static int is_ours(int i, const struct sigaction *a) {
    return (a->sa_flags & SA_SIGINFO) && a->sa_sigaction == handler_of(i);
}

static int same_action(const struct sigaction *a, const struct sigaction *b) {
    return (a->sa_flags & SA_SIGINFO) == (b->sa_flags & SA_SIGINFO) &&
           ((a->sa_flags & SA_SIGINFO) ? a->sa_sigaction == b->sa_sigaction : a->sa_handler == b->sa_handler);
}

/* Records `found` (in front of ours, or there before ours) as the newest action ours displaced. */
static void displaced(chain_t *c, const struct sigaction *found) {
    if (!(found->sa_flags & SA_SIGINFO) && (found->sa_handler == SIG_DFL || found->sa_handler == SIG_IGN)) {
        c->below[0] = *found;   /* chains to nothing: what lay under it is moot */
        c->depth = 1;
        return;
    }
    for (int k = 0; k < c->depth; k++) {
        if (same_action(&c->below[k], found)) {   /* one that was there before came back */
            c->below[k] = *found;
            c->depth = k + 1;
            return;
        }
    }
    if (c->depth < MAX_BELOW) c->depth++;
    c->below[c->depth - 1] = *found;
}

static void put_in_front(int i, const struct sigaction *found) {
    chain_t *c = &chains[i];
    displaced(c, found);
    struct sigaction *mine = &c->mine;
    memset(mine, 0, sizeof *mine);
    mine->sa_sigaction = handler_of(i);
    sigemptyset(&mine->sa_mask);
    mine->sa_flags = SA_SIGINFO | SA_ONSTACK;
    if (i < FAULT_SIGNALS) mine->sa_flags |= SA_NODEFER;
    /* Interrupted system calls of threads outside guarded code (a sleeping pool thread) restart; for Ctrl-C,
     * whatever the handler under ours asked for (Python's does not restart, so that a blocking call ends
     * and its handler runs). */
    if (i == INTERRUPT_INDEX) mine->sa_flags |= SA_RESTART;
    if (i == SIGINT_INDEX) {
        mine->sa_flags |= found->sa_flags & SA_RESTART;
        mine->sa_mask = found->sa_mask;
    }
    sigaction(c->signal, mine, NULL);
}

static pthread_mutex_t check_lock = PTHREAD_MUTEX_INITIALIZER;

/* In a forked child only the forking thread is left: no other thread is in guarded code or can be sent
 * a stop (pthread_kill on a thread of the parent's is undefined), and no launch runs. */
static void after_fork(void) {
    int n = atomic_load(&num_guarded_threads);
    for (int i = 0; i < n && i < MAX_GUARDED_THREADS; i++) {
        if (i == guard_slot) continue;
        atomic_store(&guarded_depth[i], 0);
        atomic_store(&interrupts_sent[i], 0);
    }
    atomic_store(&launch_running, 0);
    atomic_store(&stop_request, 0);
    pthread_mutex_init(&check_lock, NULL);
}

static void install(void) {
    pthread_atfork(NULL, NULL, after_fork);
    for (int i = 0; i < FAULT_SIGNALS; i++) chains[i].signal = fault_signals[i];
    chains[INTERRUPT_INDEX].signal = interrupt_signal();
    chains[SIGINT_INDEX].signal = SIGINT;
    for (int i = 0; i < CHAINED; i++) {
        struct sigaction found;
        sigaction(chains[i].signal, NULL, &found);
        put_in_front(i, &found);
    }
    sigemptyset(&handled);
    for (int i = 0; i < FAULT_SIGNALS; i++) sigaddset(&handled, fault_signals[i]);
    sigaddset(&handled, interrupt_signal());
}

void spine_fault_guard_install(void) { pthread_once(&installed, install); }

void spine_fault_guard_emulate_with(int (*emulate)(void *context)) { atomic_store(&emulator, emulate); }

void spine_fault_guard_check_handlers(void) {
    spine_fault_guard_install();
    pthread_mutex_lock(&check_lock);
    for (int i = 0; i < CHAINED; i++) {
        struct sigaction found;
        if (sigaction(chains[i].signal, NULL, &found) == 0 && !is_ours(i, &found)) put_in_front(i, &found);
    }
    pthread_mutex_unlock(&check_lock);
}

void spine_fault_guard_on_sigint(void (*notify)(void)) { atomic_store(&sigint_notify, notify); }

/* ------------------------------------------------------------------------------------------ launches */

/* The executable segment of the shared object holding each entry point seen: kernels stay loaded for the
 * life of the process, so the answer never goes stale. A miss walks every loaded object (dl_iterate_phdr:
 * torch's libraries and every kernel), so the table is open-addressed from a multiplicative hash of the
 * whole address: every kernel's spine_entry sits at the same offset of a page-aligned object, and a slot
 * chosen by the low bits alone put them all in one slot, a walk at every launch of a model that alternates
 * kernels. Once full, a new entry point takes its home slot. */
#define CODE_CACHE_BITS 10
#define CODE_CACHE (1u << CODE_CACHE_BITS)
static struct { const void *entry; uintptr_t lo, hi; } code_cache[CODE_CACHE];
static _Atomic uint64_t code_lookups;

uint64_t spine_fault_guard_code_lookups(void) { return atomic_load(&code_lookups); }

typedef struct {
    uintptr_t address, lo, hi;
} code_lookup_t;

static int find_segment(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    code_lookup_t *l = data;
    for (int k = 0; k < info->dlpi_phnum; k++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[k];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X)) continue;
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
        if (l->address >= lo && l->address < hi) {
            l->lo = lo;
            l->hi = hi;
            return 1;
        }
    }
    return 0;
}

static unsigned code_slot(const void *entry) {
    unsigned home = (unsigned)(((uint64_t)(uintptr_t)entry * 0x9E3779B97F4A7C15ull) >> (64 - CODE_CACHE_BITS));
    for (unsigned probe = 0; probe < CODE_CACHE; probe++) {
        unsigned slot = (home + probe) % CODE_CACHE;
        if (code_cache[slot].entry == entry || code_cache[slot].entry == NULL) return slot;
    }
    return home;
}

uint64_t spine_fault_guard_begin_launch(const void *entry) {
    unsigned slot = code_slot(entry);
    if (code_cache[slot].entry != entry) {
        code_lookup_t l = {(uintptr_t)entry, 0, 0};   /* not found: no code to stop in, only safe points */
        atomic_fetch_add_explicit(&code_lookups, 1, memory_order_relaxed);
        dl_iterate_phdr(find_segment, &l);
        code_cache[slot].entry = entry;
        code_cache[slot].lo = l.lo;
        code_cache[slot].hi = l.hi;
    }
    /* Release stores, not sequentially consistent ones: those cost an exchange each (x86), measurable on a
     * launch; launches are one at a time, so the number needs no atomic increment either. */
    atomic_store_explicit(&kernel_lo, code_cache[slot].lo, memory_order_release);
    atomic_store_explicit(&kernel_hi, code_cache[slot].hi, memory_order_release);
    uint64_t launch = atomic_load_explicit(&launch_number, memory_order_relaxed) + 1;
    atomic_store_explicit(&launch_number, launch, memory_order_release);
    atomic_store_explicit(&launch_running, 1, memory_order_release);
    return launch;
}

void spine_fault_guard_end_launch(void) { atomic_store_explicit(&launch_running, 0, memory_order_release); }

int spine_fault_guard_poisoned(void) { return atomic_load(&poisoned); }

void spine_fault_guard_stop(uint64_t launch, int reason, int force) {
    if (launch != atomic_load(&launch_number) || !atomic_load(&launch_running)) return;
    atomic_store(&stop_request, launch << 4 | (uint64_t)reason << 1 | (force ? 1 : 0));
    int n = atomic_load(&num_guarded_threads);
    for (int i = 0; i < n && i < MAX_GUARDED_THREADS; i++) {
        if (atomic_load(&guarded_depth[i]) == 0) continue;
        atomic_fetch_add(&interrupts_sent[i], 1);
        if (pthread_kill(guarded_threads[i], interrupt_signal()) != 0) atomic_fetch_sub(&interrupts_sent[i], 1);
    }
}

void spine_fault_guard_safe_point(void) {
    sigjmp_buf *jump = active_jump;
    if (!stop_pending || !jump || unstoppable) return;
    uint64_t request = live_request();
    if (!request) return;
    leave_guard(jump, SPINE_FAULT_STOPPED, 0, 0, (uintptr_t)__builtin_return_address(0), stop_flags(request));
}

void spine_fault_guard_unstoppable(int entering) { unstoppable += entering ? 1 : -1; }

/* ------------------------------------------------------------------------------------------ guarded calls */

void spine_fault_guard_thread_init(void) {
    if (has_alt_stack) return;
    stack_t current;
    if (sigaltstack(NULL, &current) == 0 && !(current.ss_flags & SS_DISABLE)) {
        has_alt_stack = 1;  /* the thread has one already (Python's faulthandler sets one) */
        return;
    }
    stack_t alt;
    alt.ss_size = 64 * 1024;
    alt.ss_sp = malloc(alt.ss_size);  /* lives as long as the thread; never freed */
    alt.ss_flags = 0;
    if (alt.ss_sp && sigaltstack(&alt, NULL) == 0) has_alt_stack = 1;
}

int spine_guarded_call(void (*body)(void *), void *ctx, spine_fault_t *fault) {
    /* Guards nest (a parallel loop inside a guarded program): the outer one is back in force afterwards. */
    sigjmp_buf jump;
    sigjmp_buf *outer_jump = active_jump;
    spine_fault_t *outer_fault = active_fault;
    _Atomic int *volatile depth = this_thread_depth();
    volatile int outer_unstoppable = unstoppable;
    spine_fault_guard_thread_init();
    fault->signal = 0;
    fault->flags = 0;
    if (depth) atomic_fetch_add(depth, 1);
    /* No signal mask saved: that is a system call on every launch. A handler leaves by siglongjmp with
     * the signal it ran for still blocked, so the way back unblocks it. */
    if (sigsetjmp(jump, 0)) {
        pthread_sigmask(SIG_UNBLOCK, &handled, NULL);
        active_fault = outer_fault;
        active_jump = outer_jump;
        unstoppable = outer_unstoppable;
        stop_pending = 0;
        if (depth) atomic_fetch_sub(depth, 1);
        return 1;
    }
    active_fault = fault;
    active_jump = &jump;
    body(ctx);
    active_fault = outer_fault;
    active_jump = outer_jump;
    if (depth) atomic_fetch_sub(depth, 1);
    return 0;
}

int spine_fault_guard_active(void) { return active_jump != NULL; }

void spine_fault_raise(const spine_fault_t *fault) {
    sigjmp_buf *jump = active_jump;
    if (!jump) {
        raise(fault->signal);   /* unguarded: the fault's usual end (or report) */
        abort();
    }
    active_jump = NULL;
    *active_fault = *fault;
    siglongjmp(*jump, 1);
}

/* ------------------------------------------------------------------------------------------ reports */

static const char *signal_name(int sig) {
    switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    default: return "signal";
    }
}

static const char *signal_meaning(int sig, int code) {
    switch (sig) {
    case SIGSEGV: return "invalid memory access";
    case SIGBUS: return "misaligned or unmapped memory access";
    case SIGFPE: return code == FPE_INTDIV ? "integer division by zero"
                      : code == FPE_INTOVF ? "integer overflow in division" : "arithmetic exception";
    case SIGILL: return "illegal instruction: was the kernel compiled for a CPU this machine is not?";
    default: return "fault";
    }
}

static void describe_stop(const spine_fault_t *fault, const char *at, char *buffer, int size) {
    const char *why = (fault->flags & SPINE_FAULT_INTERRUPTED) ? "stopped by Ctrl-C (SIGINT)"
                      : "stopped: it ran longer than SPINE_KERNEL_TIMEOUT allows";
    if (fault->flags & SPINE_FAULT_OUTSIDE_KERNEL)
        snprintf(buffer, (size_t)size, "%s, inside the C library or the runtime (at %s), which may hold locks "
                 "it never releases: later launches refuse, and the process must be restarted", why, at);
    else
        snprintf(buffer, (size_t)size, "%s (at %s)", why, at);
}

void spine_fault_describe(const spine_fault_t *fault, char *buffer, int size) {
    Dl_info info;
    char where[512] = "";
    if (fault->pc && dladdr((void *)fault->pc, &info) && info.dli_fname) {
        snprintf(where, sizeof where, " in %s+0x%lx", info.dli_fname,
                 (unsigned long)(fault->pc - (uintptr_t)info.dli_fbase));
    }
    if (fault->signal == SPINE_FAULT_STOPPED) {
        describe_stop(fault, where[0] ? where + 4 : "an unknown address", buffer, size);
        return;
    }
    if (fault->flags & SPINE_FAULT_RERAISED) {
        snprintf(buffer, (size_t)size, "%s (%s), passed on by a signal handler installed in front of Spine's "
                 "(address and code unknown)", signal_name(fault->signal), signal_meaning(fault->signal, 0));
        return;
    }
    const char *store = (fault->flags & SPINE_FAULT_STORE)
        ? ": a store to memory the kernel does not own. Its stores before this one may have overwritten "
          "memory of this process (the heap, other tensors), so the process may be damaged: restart it to "
          "be safe, and compile the kernel with debug=True (or TRITON_DEBUG=1) to check every access "
          "against its tensor's bounds"
        : "";
    snprintf(buffer, (size_t)size, "%s (%s) at address 0x%lx%s%s", signal_name(fault->signal),
             signal_meaning(fault->signal, fault->code), (unsigned long)fault->address, where, store);
}

static void report_and_die(int sig, siginfo_t *info, void *context) {
    if (emulated(sig, info, context)) return;
    /* Not async-signal-safe (dladdr, snprintf), which is acceptable: the process ends right after. */
    spine_fault_t fault = {sig, info->si_code, (uintptr_t)info->si_addr, fault_pc(context), 0};
    char line[900];
    memcpy(line, "spine-fault: ", 13);
    spine_fault_describe(&fault, line + 13, (int)sizeof line - 15);
    size_t n = strlen(line);
    line[n++] = '\n';
    if (write(2, line, n) < 0) {}
    signal(sig, SIG_DFL);  /* returning re-executes the instruction, which now ends the process */
}

void spine_fault_report_on_exit(void) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = report_and_die;
    action.sa_flags = SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    for (int i = 0; i < FAULT_SIGNALS; i++) sigaction(fault_signals[i], &action, NULL);
}
