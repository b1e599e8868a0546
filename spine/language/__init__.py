"""Kernel-side language extensions: `cpu.libdevice` (math) and `smt` (matrix tiles)."""
