#!/usr/bin/env bash
# Debian packages for running riscv64 kernels on a non-riscv machine: QEMU user mode and the riscv64
# glibc the guest-side kernel server loads. Skips apt entirely when they are already installed.
#
# QEMU must be 8.1 or newer: 7.2 (Debian 12's own) aborts translating RVV float-to-integer conversions
# with a static rounding mode (vfcvt.rtz.*), which LLVM emits for every vectorised fptosi/fptoui. On
# Debian 12 it comes from bookworm-backports (QEMU 10); Debian 13 and later ship a new enough one.
set -euo pipefail
if [ "$(uname -m)" = "riscv64" ]; then
  exit 0  # kernels run natively
fi

qemu_is_new_enough() {
  local version
  version=$(qemu-riscv64 --version 2>/dev/null | sed -n 's/^qemu-riscv64 version \([0-9]*\)\.\([0-9]*\).*/\1 \2/p')
  [ -n "$version" ] || return 1
  set -- $version
  [ "$1" -gt 8 ] || { [ "$1" -eq 8 ] && [ "$2" -ge 1 ]; }
}

missing=()
dpkg -s libc6-riscv64-cross >/dev/null 2>&1 || missing+=(libc6-riscv64-cross)
qemu_is_new_enough || missing+=(qemu-user)
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
. "$(dirname "$0")/apt_sources.sh"
SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
release=()
. /etc/os-release
if [ "${VERSION_CODENAME:-}" = "bookworm" ] && [[ " ${missing[*]} " == *" qemu-user "* ]]; then
  if ! grep -rqs "bookworm-backports" /etc/apt/sources.list /etc/apt/sources.list.d/; then
    archive=$(archive_serving bookworm)
    [ -n "$archive" ] || { echo "no configured apt source serves bookworm: cannot add bookworm-backports" >&2; exit 1; }
    echo "Types: deb
URIs: $archive
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg" | $SUDO tee /etc/apt/sources.list.d/bookworm-backports.sources >/dev/null
  fi
  release=(-t bookworm-backports)
fi
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${release[@]}" "${missing[@]}"
qemu_is_new_enough || { echo "qemu-riscv64 8.1 or newer is needed: $(qemu-riscv64 --version | head -1)" >&2; exit 1; }
