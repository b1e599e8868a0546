"""SmolLM2 (a Llama decoder) whose every op is a Triton kernel Spine compiles (smollm2/kernels.py), over the
GGUF's quantized weights, with a KV cache: `forward` a prompt, then `decode` one token at a time.

A decode step launches the same ~180 kernels on the same buffers every token, so `decode` records them once
in a launch graph (spine/driver/graph.py) and replays it: the token and its position are the only things
that change, and they live in tensors the kernels read."""
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from spine.driver.graph import LaunchGraph

from . import int8_kernels, kernels, paired_kernels
from .gguf_file import GGUFModel, LlamaConfig, read_gguf
from .kernels import QuantMatrix, argmax, rope_and_cache


@dataclass(frozen=True)
class Layer:
    attn_norm: torch.Tensor
    qkv: QuantMatrix      # q, k and v rows stacked: one projection instead of three
    out: QuantMatrix
    ffn_norm: torch.Tensor
    gate: QuantMatrix
    up: QuantMatrix
    down: QuantMatrix


# the GGUF's projection matrices of a layer (blk.<i>.<name>.weight)
PROJECTIONS = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")


def _array(tensor) -> torch.Tensor:
    # no copy: a view of the mapped file, which stays mapped while the tensor lives
    return torch.from_numpy(tensor.data)


def _matrix(tensor) -> QuantMatrix:
    return QuantMatrix(tensor.kind, _array(tensor), tensor.shape[1])


def _stacked(*tensors) -> QuantMatrix:
    kinds = {t.kind for t in tensors}
    if len(kinds) != 1:
        raise ValueError(f"cannot stack {', '.join(t.name for t in tensors)}: types {sorted(kinds)}")
    return QuantMatrix(kinds.pop(), torch.from_numpy(np.concatenate([t.data for t in tensors])), tensors[0].shape[1])


@dataclass
class Timings:
    prefill_tokens: int = 0
    prefill_s: float = 0.0
    decode_tokens: int = 0
    decode_s: float = 0.0


@dataclass
class SmolLM2:
    config: LlamaConfig
    layers: list
    embed: QuantMatrix            # tied: the token embedding and the output head
    output_norm: torch.Tensor
    capacity: int
    k_cache: list = field(default_factory=list)
    v_cache: list = field(default_factory=list)
    length: int = 0               # tokens in the cache
    int8: bool = False            # quantize the products' activations to int8 blocks, as llama.cpp does
    paired: bool = False          # the int8 mode's Q4_1 matrices in row pairs, for a matrix unit (paired_kernels.py)
    # the position of the tokens a forward pass runs (int32 [1]), which the RoPE and attention kernels read
    position: torch.Tensor = field(default_factory=lambda: torch.from_numpy(np.zeros(1, np.int32)))
    _decode: "_DecodeStep | None" = None

    @classmethod
    def load(cls, source=None, capacity=1024, n_layers=None, int8=False):
        """From a GGUF path, an already read GGUFModel, or (None) the bundled SmolLM2; n_layers keeps a prefix
        of the layers: a smaller model with the same kernels, for tests. int8: the products take activations
        quantized to int8 blocks (int8_kernels.py), llama.cpp's arithmetic; otherwise fp32 activations."""
        gguf = source if isinstance(source, GGUFModel) else read_gguf(source)
        cfg = gguf.config
        if n_layers is not None:
            cfg = LlamaConfig(**{**cfg.__dict__, "n_layers": n_layers})
        if capacity > cfg.context:
            raise ValueError(f"a KV cache of {capacity} tokens exceeds the model's context of {cfg.context}")
        t = gguf.tensor
        layers = [Layer(_array(t(f"blk.{i}.attn_norm.weight")),
                        _stacked(t(f"blk.{i}.attn_q.weight"), t(f"blk.{i}.attn_k.weight"), t(f"blk.{i}.attn_v.weight")),
                        _matrix(t(f"blk.{i}.attn_output.weight")),
                        _array(t(f"blk.{i}.ffn_norm.weight")),
                        _matrix(t(f"blk.{i}.ffn_gate.weight")), _matrix(t(f"blk.{i}.ffn_up.weight")),
                        _matrix(t(f"blk.{i}.ffn_down.weight")))
                  for i in range(cfg.n_layers)]
        head = t("output.weight") if "output.weight" in gguf.tensors else t("token_embd.weight")
        if head.name != "token_embd.weight":
            raise ValueError("an untied output head is not supported")
        paired = int8 and paired_kernels.matrix_rows() and all(
            paired_kernels.pairs_fit(m) for layer in layers for m in (layer.qkv, layer.out, layer.gate, layer.up,
                                                                      layer.down))
        if paired:
            layers = [Layer(layer.attn_norm, *(paired_kernels.paired(m) for m in (layer.qkv, layer.out)),
                            layer.ffn_norm, *(paired_kernels.paired(m) for m in (layer.gate, layer.up, layer.down)))
                      for layer in layers]
        table = paired_kernels.split(_matrix(head)) if paired else _matrix(head)
        if paired:   # the matrices now live in their repacked copies
            gguf.release([head.name] + [f"blk.{i}.{name}.weight" for i in range(cfg.n_layers) for name in PROJECTIONS])
        model = cls(cfg, layers, table, _array(t("output_norm.weight")), capacity, int8=int8, paired=paired)
        model.reset()
        return model

    def reset(self):
        """Empties the KV cache. Its memory stays (what is past `length` is never read), so a captured decode
        step stays valid."""
        if not self.k_cache:
            cfg = self.config
            shape = (cfg.n_kv_heads, self.capacity, cfg.head_dim)
            # the int8 mode keeps llama.cpp's default cache, fp16 keys and values
            kind = torch.float16 if self.int8 else torch.float32
            self.k_cache = [torch.empty(shape, dtype=kind) for _ in self.layers]
            self.v_cache = [torch.empty(shape, dtype=kind) for _ in self.layers]
        self.length = 0

    @property
    def weight_bytes(self) -> int:
        mats = [self.embed] + [m for layer in self.layers for m in (layer.qkv, layer.out, layer.gate, layer.up,
                                                                     layer.down)]
        return sum(m.nbytes for m in mats)

    @property
    def products(self):
        """The module whose embedding, linear, swiglu and attention the forward pass launches."""
        if self.paired:
            return paired_kernels
        return int8_kernels if self.int8 else kernels

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Runs tokens `ids` (int32 [T]) after the cached ones; returns the logits of the last, [vocab]."""
        cfg = self.config
        t = ids.numel()
        if t == 0:
            raise ValueError("no tokens to run")
        if self.length + t > self.capacity:
            raise ValueError(f"{self.length} cached + {t} new tokens exceed the KV cache's {self.capacity} "
                             f"(SmolLM2.load(capacity=...), at most the model's context of {cfg.context})")
        self.position.numpy()[0] = self.length  # through numpy: not a torch op
        x = self.products.embedding(ids, self.embed)
        for i in range(len(self.layers)):
            x = self.run_layer(i, x)
        self.length += t
        return self.products.linear(x[t - 1:], self.embed, norm=self.output_norm, eps=cfg.rms_eps)[0]

    def run_layer(self, i: int, x: torch.Tensor) -> torch.Tensor:
        """Layer i over activations x [T, width] of the tokens after the cached ones: writes their keys and
        values into its cache, leaves `length` to forward. The benchmark counts one layer through this."""
        cfg, layer, k_cache, v_cache = self.config, self.layers[i], self.k_cache[i], self.v_cache[i]
        linear, swiglu = self.products.linear, self.products.swiglu
        qkv = linear(x, layer.qkv, norm=layer.attn_norm, eps=cfg.rms_eps)
        rope_and_cache(qkv, k_cache, v_cache, self.position, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim,
                       cfg.rope_base)
        mixed = self.products.attention(qkv, k_cache, v_cache, self.position, cfg.n_heads, cfg.n_kv_heads,
                                        cfg.head_dim)
        x = linear(mixed, layer.out, residual=x)
        return linear(swiglu(x, layer.ffn_norm, layer.gate, layer.up, cfg.rms_eps), layer.down, residual=x)

    def decode(self, token: int) -> int:
        """Runs one token after the cached ones; returns the greedy next token. The first call records the
        step's launches in a launch graph, later calls replay it."""
        if self.length + 1 > self.capacity:
            raise ValueError(f"{self.length} cached tokens fill the KV cache's {self.capacity}")
        if self._decode is None:
            self._decode = _DecodeStep.capture(self, token)
        else:
            self._decode.run(self, token)
        return int(self._decode.next_token.numpy()[0])

    def generate(self, prompt: list, max_new_tokens: int, stop=(), timings: Timings | None = None) -> list:
        """Greedy decoding: the new token ids, at most max_new_tokens, ending early at a token in `stop`."""
        if not prompt:
            raise ValueError("an empty prompt")
        if len(prompt) + max_new_tokens - 1 > self.capacity:
            raise ValueError(f"a prompt of {len(prompt)} tokens and {max_new_tokens} new ones exceed the KV cache's "
                             f"{self.capacity} tokens (SmolLM2.load(capacity=...), at most the model's context of "
                             f"{self.config.context})")
        timings = timings if timings is not None else Timings()
        self.reset()
        started = time.perf_counter()
        token = int(argmax(self.forward(torch.tensor(prompt, dtype=torch.int32))))
        timings.prefill_tokens, timings.prefill_s = len(prompt), time.perf_counter() - started
        new = [token]
        started = time.perf_counter()
        while len(new) < max_new_tokens and token not in stop:
            token = self.decode(token)
            new.append(token)
        timings.decode_tokens, timings.decode_s = len(new) - 1, time.perf_counter() - started
        return new


@dataclass
class _DecodeStep:
    """One token's forward pass and argmax, as a launch graph over fixed buffers: `token` (int32 [1]) in,
    `next_token` (int32 [1]) out; the model's `position` says where."""
    graph: LaunchGraph
    token: torch.Tensor
    next_token: torch.Tensor

    @classmethod
    def capture(cls, model: SmolLM2, token: int) -> "_DecodeStep":
        ids = torch.from_numpy(np.array([token], dtype=np.int32))
        graph = LaunchGraph()
        with graph.capture():  # runs the step as it records it
            next_token = argmax(model.forward(ids))
        return cls(graph, ids, next_token)

    def run(self, model: SmolLM2, token: int) -> None:
        self.token.numpy()[0] = token
        model.position.numpy()[0] = model.length
        self.graph.replay()
        model.length += 1
