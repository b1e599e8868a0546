#!/usr/bin/env bash
# Triton's own language tests on Spine, used in place from ../shared/conformance: one line per test file
# (passed, failed, skipped, known failures, the tests' own xfails, pass rate, seconds), its failures and
# known failures, then the totals. Long (the whole test_core.py takes hours on two shared cores), so not
# part of `make test`, which runs a seeded slice instead.
#
#   tests/conformance/run.sh [host|riscv64] [extra pytest arguments, e.g. --sample 500 --sample-seed 1]
#
# FILES="test_core.py test_tuple.py" picks files; --sample N applies to each file (files with fewer cases
# run whole). Reports and logs stay in the directory printed last (REPORTS=dir to choose it).
set -uo pipefail
cd "$(dirname "$0")/../.."
target=${1:-host}
shift || true
suite=../shared/conformance/triton-language-tests
reports=${REPORTS:-$(mktemp -d)}
mkdir -p "$reports"
files=(${FILES:-test_core.py test_standard.py test_random.py test_conversions.py test_block_pointer.py
       test_tensor_descriptor.py test_libdevice.py test_tuple.py})
echo "target: $target"
for file in "${files[@]}"; do
  .venv/bin/python -m pytest -p tests.conformance.plugin --spine-target "$target" "$suite/$file" -q \
    -p no:cacheprovider --tb=line --junitxml="$reports/$file.xml" "$@" > "$reports/$file.log" 2>&1
  .venv/bin/python -m tests.conformance.summary "$reports/$file.xml" "$file" --failures
done
.venv/bin/python -m tests.conformance.summary --total "$reports"/*.xml
echo "reports and logs: $reports"
