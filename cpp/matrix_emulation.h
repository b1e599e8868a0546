/* SpacemiT's integer matrix instructions (K1's IME: smt.vmadot, vmadotu, vmadotsu, vmadotus and the
 * sliding-window vmadot1/2/3 forms) carried out in software, for riscv64 processes whose CPU lacks them:
 * QEMU user mode, where kernels built for the matrix unit are tested. The instruction traps (SIGILL); the
 * handler computes what SpacemiT's specification says it computes, on the interrupted code's vector
 * registers, and resumes after it. On a chip with the matrix unit the instruction runs natively and none of
 * this is reached. */
#ifndef SPINE_MATRIX_EMULATION_H
#define SPINE_MATRIX_EMULATION_H

/* Turns the emulation on where it can work, and says whether it is on: where the vector registers a signal
 * handler changes reach the interrupted code (QEMU user mode). A Linux kernel restores them from the signal
 * frame instead; there (on a real chip, which has the instructions or rightly faults) it stays off. Tried
 * once, with SIGUSR2 briefly handled: call it at start-up, before other threads exist. */
int spine_matrix_emulation_enable(void);

/* For a SIGILL's ucontext: when the emulation is on and the faulting instruction is one it emulates, carries
 * it out, advances the saved pc past it and returns 1; else 0 (the fault stands). Async-signal-safe. */
int spine_matrix_emulate(void *context);

/* For programs without Spine's fault guard (a llama.cpp binary run under QEMU to check the emulation
 * against SpacemiT's own kernels): installs a SIGILL handler that emulates, and otherwise restores the
 * default action so that the fault ends the process as before. Nothing where the emulation cannot be on. */
void spine_matrix_emulation_install(void);

/* How many instructions this process has emulated: shows that code for the matrix unit ran, rather than a
 * fallback. */
unsigned long spine_matrix_emulated(void);

#endif
