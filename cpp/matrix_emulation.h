/* SpacemiT's integer matrix instructions (K1's IME: smt.vmadot, vmadotu, vmadotsu, vmadotus and the
 * sliding-window vmadot1/2/3 forms) carried out in software, for riscv64 processes whose CPU lacks them:
 * QEMU user mode, where kernels built for the matrix unit are tested. The instruction traps (SIGILL); the
 * handler computes what SpacemiT's specification says it computes, on the interrupted code's vector
 * registers, and resumes after it. On a chip with the matrix unit the instruction runs natively and none of
 * this is reached. */
#ifndef SPINE_MATRIX_EMULATION_H
#define SPINE_MATRIX_EMULATION_H

/* For a SIGILL's ucontext: when the faulting instruction is one this emulates, carries it out, advances the
 * saved pc past it and returns 1; else 0 (the fault stands). Emulates only where the vector registers the
 * handler sees are the interrupted code's and go back to it as the handler leaves them (QEMU user mode):
 * a Linux kernel that saves the vector registers in the signal frame restores them from there, so there
 * it returns 0. Async-signal-safe. A stub returning 0 on other architectures. */
int spine_matrix_emulate(void *context);

/* For programs without Spine's fault guard (a llama.cpp binary run under QEMU to check the emulation
 * against SpacemiT's own kernels): installs a SIGILL handler that emulates, and otherwise restores the
 * default action so that the fault ends the process as before. */
void spine_matrix_emulation_install(void);

#endif
