/* Turning a crash inside a kernel into an error the caller can raise, for kernels that run inside the
 * user's own process (the host target): SIGSEGV, SIGBUS, SIGFPE and SIGILL raised while a thread runs
 * guarded code jump back out of that code instead of ending the process. Faults outside guarded code
 * go to whatever handler was installed before (Python's faulthandler, or the default action). */
#ifndef SPINE_FAULT_GUARD_H
#define SPINE_FAULT_GUARD_H
#include <stdint.h>

/* spine_fault_t.signal of guarded code stopped by spine_fault_guard_interrupt (it ran too long). */
#define SPINE_FAULT_STOPPED (-2)

typedef struct {
    int signal;          /* 0: no fault; SPINE_FAULT_STOPPED: interrupted */
    int code;            /* si_code */
    uintptr_t address;   /* si_addr: the faulting data address (or instruction, for SIGILL/SIGFPE) */
    uintptr_t pc;        /* where the faulting instruction is */
} spine_fault_t;

/* Installs the handlers once per process (later calls do nothing). */
void spine_fault_guard_install(void);

/* Runs body(ctx). Returns 0 when it returned normally, 1 when it faulted (fault filled in). A faulting body
 * is abandoned where it stood: memory it allocated is lost and locks it held stay held. */
int spine_guarded_call(void (*body)(void *), void *ctx, spine_fault_t *fault);

/* Makes every thread that runs guarded code now leave it as if it had faulted (signal SPINE_FAULT_STOPPED),
 * by a real-time signal to each: for stopping kernels that run too long. Threads outside guarded code
 * ignore it. */
void spine_fault_guard_interrupt(void);

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
