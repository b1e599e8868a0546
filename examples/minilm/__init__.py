"""all-MiniLM-L6-v2 as a plain torch module (bert.py), for examples/06_minilm.py, bench/minilm.py and the tests."""
