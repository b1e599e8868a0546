/* Turning a crash inside a kernel into an error the caller can raise, for kernels that run inside the
 * user's own process (the host target): SIGSEGV, SIGBUS, SIGFPE and SIGILL raised by the CPU while a thread
 * runs guarded code jump back out of that code instead of ending the process. Every other one of those
 * signals (a fault outside guarded code, or one sent by a process: `kill -SEGV`) goes to whatever handler
 * was installed before ours (Python's faulthandler, a JVM's, or the default action).
 *
 * Stopping guarded code that runs too long (the watchdog) or that Ctrl-C interrupts: a thread is only
 * stopped where it holds nothing, so that the process stays whole. The guarantee:
 *   - A stop takes effect only while the thread's interrupted instruction lies in the launched kernel's own
 *     code (its shared object's executable segment, which calls nothing that takes a lock without coming
 *     back), or at a safe point of the runtime's (spine_fault_guard_safe_point: after device print has
 *     released its locks, in barrier waits). Anywhere else (the C library, the runtime's print or pool
 *     code) the stop stays pending and the watchdog tries again a millisecond later.
 *   - A thread that stays outside those places for several watchdog periods (a kernel blocked for good in a
 *     write to a full pipe) is stopped anyway, and the runtime is poisoned: a lock it held may stay held, so
 *     every later launch refuses (spine_fault_guard_poisoned) and the process must be restarted.
 *   - Waits that must not be left early (a parallel loop's thread waiting for its helpers, whose team lives
 *     on its stack) are never stopped: they end once the helpers are stopped.
 *
 * Handlers installed after ours (faulthandler.enable, signal.signal for SIGINT, a JVM's) are found by
 * spine_fault_guard_check_handlers, which puts ours back in front and chains to theirs: kernel faults stay
 * ours, every other signal reaches them as before. */
#ifndef SPINE_FAULT_GUARD_H
#define SPINE_FAULT_GUARD_H
#include <stdint.h>

/* spine_fault_t.signal of guarded code stopped by spine_fault_guard_stop (it ran too long, or Ctrl-C). */
#define SPINE_FAULT_STOPPED (-2)

/* spine_fault_t.flags */
#define SPINE_FAULT_STORE 1            /* the faulting access was a store (where the CPU says so) */
#define SPINE_FAULT_INTERRUPTED 2      /* stopped for SIGINT rather than for the timeout */
#define SPINE_FAULT_OUTSIDE_KERNEL 4   /* stopped outside kernel code: the runtime is poisoned */
#define SPINE_FAULT_RERAISED 8         /* raised again by a handler that ran ahead of ours: no address */

/* Why spine_fault_guard_stop stops a launch. */
#define SPINE_STOP_TIMEOUT 1
#define SPINE_STOP_INTERRUPT 2

typedef struct {
    int signal;          /* 0: no fault; SPINE_FAULT_STOPPED: interrupted */
    int code;            /* si_code */
    uintptr_t address;   /* si_addr: the faulting data address (or instruction, for SIGILL/SIGFPE) */
    uintptr_t pc;        /* where the faulting instruction is */
    int flags;           /* SPINE_FAULT_* */
} spine_fault_t;

/* Installs the handlers once per process (later calls do nothing). */
void spine_fault_guard_install(void);

/* An illegal instruction the CPU raised goes to emulate(ucontext) first, wherever it happens: when that
 * returns 1 (it carried the instruction out and moved the pc past it), the code goes on as if the CPU had
 * executed it. The QEMU kernel server emulates SpacemiT's matrix instructions so (matrix_emulation.h). */
void spine_fault_guard_emulate_with(int (*emulate)(void *context));

/* Puts our handlers back in front of any installed since (chaining to those): after Python code or a
 * library changed a handler. One system call per handled signal, so not on every launch. */
void spine_fault_guard_check_handlers(void);

/* Runs body(ctx). Returns 0 when it returned normally, 1 when it faulted (fault filled in). A faulting body
 * is abandoned where it stood: memory it allocated is lost (a stop, see above, holds no lock). */
int spine_guarded_call(void (*body)(void *), void *ctx, spine_fault_t *fault);

/* A launch of the kernel whose entry point is `entry` begins (its number is returned) / has ended: a stop
 * aims at one launch (a stop requested for an earlier one is ignored), and only its shared object's code
 * is stopped in. The shared object's code range is looked up once per entry point. */
uint64_t spine_fault_guard_begin_launch(const void *entry);
void spine_fault_guard_end_launch(void);

/* How many launches so far had to look their kernel's code up (the first of each kernel, and collisions in
 * the cache of code ranges). */
uint64_t spine_fault_guard_code_lookups(void);

/* Makes every thread in guarded code of launch `launch` leave it (signal SPINE_FAULT_STOPPED) where it may
 * (see above), by a real-time signal to each; nothing when that launch is over. `force`: stop threads
 * wherever they are, poisoning the runtime for those outside kernel code. Called again and again until the
 * launch has stopped. */
void spine_fault_guard_stop(uint64_t launch, int reason, int force);

/* Whether a thread was stopped where it may have held a lock: every later launch must refuse. */
int spine_fault_guard_poisoned(void);

/* Called from the runtime where the calling thread holds nothing: a stop pending for it takes effect. */
void spine_fault_guard_safe_point(void);

/* Brackets a wait that must not be left early (stops wait until it ends); nests. */
void spine_fault_guard_unstoppable(int entering);

/* Called (from the SIGINT handler, so async-signal-safe) when Ctrl-C arrives during a launch. */
void spine_fault_guard_on_sigint(void (*notify)(void));

/* Whether the calling thread runs guarded code now. */
int spine_fault_guard_active(void);

/* Ends the calling thread's guarded code as if `fault` had happened here (a fault caught on another thread
 * working for it); without a guard, raises the fault's signal. */
void spine_fault_raise(const spine_fault_t *fault);

/* Gives the calling thread an alternate signal stack if it has none, so a fault from stack overflow can
 * still be handled. */
void spine_fault_guard_thread_init(void);

/* For processes a fault may end (the QEMU kernel server): faults print "spine-fault: <description>" to
 * stderr, then end the process with the signal as before. */
void spine_fault_report_on_exit(void);

/* A one-line description: signal, address, and the shared object and offset of the faulting code. */
void spine_fault_describe(const spine_fault_t *fault, char *buffer, int size);

#endif
