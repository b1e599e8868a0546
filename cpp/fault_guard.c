/* See fault_guard.h. Written by hand because no library offers it for C called from Python: the handler
 * must be per thread (several grid threads run kernels at once) and must chain to the handlers Python
 * or the embedding program installed for faults that are not ours. */
#define _GNU_SOURCE
#include "fault_guard.h"

#include <dlfcn.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>
#include <unistd.h>

#define GUARDED_SIGNALS 4
static const int guarded[GUARDED_SIGNALS] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL};
static struct sigaction previous[GUARDED_SIGNALS];
static sigset_t handled;    /* the guarded signals and the interrupt signal */
static pthread_once_t installed = PTHREAD_ONCE_INIT;

/* Initial-exec TLS: a signal handler must not call __tls_get_addr, which may allocate. */
#define TLS __thread __attribute__((tls_model("initial-exec")))
static TLS sigjmp_buf *volatile active_jump;
static TLS spine_fault_t *volatile active_fault;
static TLS int has_alt_stack;

/* Threads that have run guarded code, and how deep in it each is now, for spine_fault_guard_interrupt. The
 * threads that run kernels (the grid's and smt.parallel's pools, the launching threads) are few and live
 * long; a thread beyond the table's size runs unguarded by interrupts only. */
#define MAX_GUARDED_THREADS 1024
static pthread_t guarded_threads[MAX_GUARDED_THREADS];
static _Atomic int guarded_depth[MAX_GUARDED_THREADS];
static _Atomic int num_guarded_threads;
static TLS int guard_slot = -1;

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

static void chain(int sig, siginfo_t *info, void *context) {
    for (int i = 0; i < GUARDED_SIGNALS; i++) {
        if (guarded[i] != sig) continue;
        struct sigaction *old = &previous[i];
        if (old->sa_flags & SA_SIGINFO) {
            old->sa_sigaction(sig, info, context);
        } else if (old->sa_handler != SIG_DFL && old->sa_handler != SIG_IGN) {
            old->sa_handler(sig);
        } else {
            /* Returning re-executes the faulting instruction, which now meets the default action. */
            signal(sig, SIG_DFL);
        }
        return;
    }
}

static void on_fault(int sig, siginfo_t *info, void *context) {
    sigjmp_buf *jump = active_jump;
    if (!jump) {
        chain(sig, info, context);
        return;
    }
    active_jump = NULL;
    spine_fault_t *fault = active_fault;
    fault->signal = sig;
    fault->code = info->si_code;
    fault->address = (uintptr_t)info->si_addr;
    fault->pc = fault_pc(context);
    siglongjmp(*jump, 1);
}

static void on_interrupt(int sig, siginfo_t *info, void *context) {
    (void)sig; (void)info;
    sigjmp_buf *jump = active_jump;
    if (!jump) return;      /* between guarded calls: the interrupt comes again while it is still wanted */
    active_jump = NULL;
    spine_fault_t *fault = active_fault;
    fault->signal = SPINE_FAULT_STOPPED;
    fault->code = 0;
    fault->address = 0;
    fault->pc = fault_pc(context);
    siglongjmp(*jump, 1);
}

static void install(void) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = on_fault;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    for (int i = 0; i < GUARDED_SIGNALS; i++) sigaction(guarded[i], &action, &previous[i]);
    /* Interrupted system calls of threads outside guarded code (a sleeping pool thread) restart. */
    action.sa_sigaction = on_interrupt;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
    sigaction(interrupt_signal(), &action, NULL);
    sigemptyset(&handled);
    for (int i = 0; i < GUARDED_SIGNALS; i++) sigaddset(&handled, guarded[i]);
    sigaddset(&handled, interrupt_signal());
}

void spine_fault_guard_interrupt(void) {
    int n = atomic_load(&num_guarded_threads);
    for (int i = 0; i < n && i < MAX_GUARDED_THREADS; i++) {
        if (atomic_load(&guarded_depth[i]) > 0) pthread_kill(guarded_threads[i], interrupt_signal());
    }
}

void spine_fault_guard_install(void) { pthread_once(&installed, install); }

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
    spine_fault_guard_thread_init();
    fault->signal = 0;
    if (depth) atomic_fetch_add(depth, 1);
    /* No signal mask saved: that is a system call on every launch. A handler leaves by siglongjmp with
     * the signal it ran for still blocked, so the way back unblocks it. */
    if (sigsetjmp(jump, 0)) {
        pthread_sigmask(SIG_UNBLOCK, &handled, NULL);
        active_fault = outer_fault;
        active_jump = outer_jump;
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

void spine_fault_describe(const spine_fault_t *fault, char *buffer, int size) {
    Dl_info info;
    char where[512] = "";
    if (fault->pc && dladdr((void *)fault->pc, &info) && info.dli_fname) {
        snprintf(where, sizeof where, " in %s+0x%lx", info.dli_fname,
                 (unsigned long)(fault->pc - (uintptr_t)info.dli_fbase));
    }
    if (fault->signal == SPINE_FAULT_STOPPED) {
        snprintf(buffer, (size_t)size, "stopped: it ran longer than SPINE_KERNEL_TIMEOUT allows (at %s)",
                 where[0] ? where + 4 : "an unknown address");
        return;
    }
    snprintf(buffer, (size_t)size, "%s (%s) at address 0x%lx%s", signal_name(fault->signal),
             signal_meaning(fault->signal, fault->code), (unsigned long)fault->address, where);
}

static void report_and_die(int sig, siginfo_t *info, void *context) {
    /* Not async-signal-safe (dladdr, snprintf), which is acceptable: the process ends right after. */
    spine_fault_t fault = {sig, info->si_code, (uintptr_t)info->si_addr, fault_pc(context)};
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
    for (int i = 0; i < GUARDED_SIGNALS; i++) sigaction(guarded[i], &action, NULL);
}
