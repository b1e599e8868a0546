#!/usr/bin/env bash
# FlagGems' own accuracy suite (../shared/conformance/flaggems-5.3.4, used in place; FlagGems itself is
# installed by scripts/setup.sh) on Spine, through its SpacemiT vendor: one line per test file (passed,
# failed, skipped, seconds), the totals and every failure. Long (the whole suite is hours on two cores), so
# not part of `make test`, which runs a seeded slice (tests/flaggems/test_slice.py).
#
#   tests/flaggems/run.sh [host|riscv64] [extra pytest arguments, e.g. --sample-per-file 2 --sample-seed 1]
#
# JOBS=N splits the files over N processes (default: 2). FILES=PATH runs only the test files listed in PATH
# (one per line, as tests/test_NAME.py); SAMPLE_FILES=N with SAMPLE_SEED=S keeps a seeded N of the files
# (random.Random(S).sample of the sorted list). Results stay in the directory printed last.
set -uo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
target=${1:-host}
shift || true
suite=../shared/conformance/flaggems-5.3.4
reports=${REPORTS:-$(mktemp -d)}
jobs=${JOBS:-2}
mkdir -p "$reports"
(cd "$suite" && ls tests/test_*.py) > "$reports/files"
if [ -n "${SAMPLE_FILES:-}" ]; then
  .venv/bin/python -c 'import random, sys; files = open(sys.argv[1]).read().split()
print("\n".join(random.Random(int(sys.argv[3])).sample(files, int(sys.argv[2]))))' \
    "$reports/files" "$SAMPLE_FILES" "${SAMPLE_SEED:-0}" > "$reports/files.sampled"
  mv "$reports/files.sampled" "$reports/files"
fi
if [ -n "${FILES:-}" ]; then
  grep -xFf "$FILES" "$reports/files" > "$reports/files.listed"
  mv "$reports/files.listed" "$reports/files"
fi
echo "target: $target, $(wc -l < "$reports/files") files, $jobs processes"
for job in $(seq 0 $((jobs - 1))); do
  awk -v n="$jobs" -v j="$job" 'NR % n == j' "$reports/files" > "$reports/files.$job"
  (cd "$suite" && GEMS_VENDOR=spacemit SPINE_TARGET=$target PYTHONPATH="$repo/tests/flaggems" \
     "$repo/.venv/bin/python" -m pytest -p spine_flaggems --results "$reports/results.jsonl" \
     --ref cpu --quick -q -p no:cacheprovider --continue-on-collection-errors --tb=line \
     $(cat "$reports/files.$job") "$@" > "$reports/log.$job" 2>&1) &
done
wait
# each failure again on eager torch (FlagGems' kernels and Spine left out): the evidence summary.py reads
.venv/bin/python -m tests.flaggems.summary "$reports/results.jsonl" --failed-ids > "$reports/failed"
if [ -s "$reports/failed" ]; then
  (cd "$suite" && GEMS_VENDOR=spacemit SPINE_TARGET=$target PYTHONPATH="$repo/tests/flaggems" \
     "$repo/.venv/bin/python" -m pytest -p spine_flaggems --eager --results "$reports/eager.jsonl" \
     --ref cpu --quick -q -p no:cacheprovider --tb=line $(cat "$reports/failed") > "$reports/log.eager" 2>&1)
fi
.venv/bin/python -m tests.flaggems.summary "$reports/results.jsonl" --eager "$reports/eager.jsonl" --failures \
  --slowest 10
echo "results and logs: $reports"
