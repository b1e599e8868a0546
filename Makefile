# `make demo`: set everything up, then compile the examples for riscv64 and run them under QEMU.
# `make test`: set everything up, then run the test suite (both targets).
PY := .venv/bin/python

.PHONY: setup demo test bench

setup:
	./scripts/setup.sh

demo: setup
	SPINE_TARGET=riscv64 $(PY) examples/01_vector_add.py
	SPINE_TARGET=riscv64 $(PY) examples/02_softmax.py
	SPINE_TARGET=riscv64 $(PY) examples/03_matrix_transpose.py

test: setup
	$(PY) -m pytest -q tests

bench: setup
	$(PY) bench/run.py
