#!/usr/bin/env bash
# Debian packages for running riscv64 kernels on a non-riscv machine: QEMU user mode and the riscv64
# glibc the guest-side kernel server loads. Skips apt entirely when they are already installed.
set -euo pipefail
packages=(qemu-user libc6-riscv64-cross)
if [ "$(uname -m)" = "riscv64" ]; then
  exit 0  # kernels run natively
fi
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
