#!/usr/bin/env bash
# Triton's own language tests on Spine, used in place from ../shared/conformance: one line of pass / fail /
# skip / known-failure counts per test file, then its failures and known failures. Long (the whole
# test_core.py takes the better part of an hour on two cores), so not part of `make test`, which runs a
# seeded slice instead.
#
#   tests/conformance/run.sh [host|riscv64] [extra pytest arguments, e.g. --sample 500 --sample-seed 1]
set -uo pipefail
cd "$(dirname "$0")/../.."
target=${1:-host}
shift || true
suite=../shared/conformance/triton-language-tests
reports=$(mktemp -d)
files=(test_core.py test_standard.py test_random.py test_conversions.py test_block_pointer.py
       test_tensor_descriptor.py test_libdevice.py test_tuple.py)
echo "target: $target"
for file in "${files[@]}"; do
  .venv/bin/python -m pytest -p tests.conformance.plugin --spine-target "$target" "$suite/$file" -q \
    -p no:cacheprovider --tb=line --junitxml="$reports/$file.xml" "$@" > "$reports/$file.log" 2>&1
  .venv/bin/python -m tests.conformance.summary "$reports/$file.xml" "$file" --failures
done
echo "reports and logs: $reports"
