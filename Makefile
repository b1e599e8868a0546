# `make demo`: set everything up, then compile the examples for riscv64 and run them under QEMU.
# `make test`: set everything up, then run the test suite (both targets).
PY := .venv/bin/python

.PHONY: setup demo test bench conformance

setup:
	./scripts/setup.sh

demo: setup
	SPINE_TARGET=riscv64 $(PY) examples/01_vector_add.py
	SPINE_TARGET=riscv64 $(PY) examples/02_softmax.py
	SPINE_TARGET=riscv64 $(PY) examples/03_matrix_transpose.py

# After the unit tests, a seeded slice of Triton's own language tests (../shared/conformance, used in place;
# known failures are xfail with their cause: tests/conformance/known_failures.py). Whole runs:
# tests/conformance/run.sh.
CONFORMANCE := ../shared/conformance/triton-language-tests
CONFORMANCE_SLICE := -p tests.conformance.plugin $(CONFORMANCE)/test_core.py --sample-seed 1 -q -p no:cacheprovider

test: setup
	$(PY) -m pytest -q tests
	@if [ -d $(CONFORMANCE) ]; then \
	  $(PY) -m pytest $(CONFORMANCE_SLICE) --spine-target host --sample 300 && \
	  $(PY) -m pytest $(CONFORMANCE_SLICE) --spine-target riscv64 --sample 80; \
	else echo "$(CONFORMANCE) not found: conformance slice skipped"; fi

# Triton's language tests, whole, per file with pass / fail / skip counts and run times (hours on two cores):
#   make conformance TARGET=riscv64 ARGS="--sample 500 --sample-seed 1"
conformance: setup
	tests/conformance/run.sh $(or $(TARGET),host) $(ARGS)

bench: setup
	$(PY) bench/run.py
