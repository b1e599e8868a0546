"""The fp32 reference: the same Llama forward pass in plain torch, over weights dequantized by the `gguf`
package's own code. It shares nothing with Spine's kernels but the file; greedy tokens from the two must
be identical."""
from dataclasses import dataclass

import torch

from .gguf_file import GGUFModel, LlamaConfig, dequantize, read_gguf


@dataclass
class Reference:
    config: LlamaConfig
    weights: dict

    @classmethod
    def load(cls, source=None, n_layers=None):
        gguf = source if isinstance(source, GGUFModel) else read_gguf(source)
        cfg = gguf.config
        if n_layers is not None:
            cfg = LlamaConfig(**{**cfg.__dict__, "n_layers": n_layers})
        keep = [name for name in gguf.tensors if not name.startswith("blk.") or int(name.split(".")[1]) < cfg.n_layers]
        return cls(cfg, {name: torch.from_numpy(dequantize(gguf.tensors[name])) for name in keep})

    def _rms(self, x, weight):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.config.rms_eps) * weight

    def _rope(self, x, positions):
        """llama.cpp's "normal" RoPE: pairs (2i, 2i + 1) of each head turn by pos * base^(-2i / head_dim)."""
        dim = x.shape[-1]
        freq = self.config.rope_base ** (-torch.arange(0, dim, 2, dtype=torch.float32) / dim)
        theta = positions[:, None].float() * freq[None, :]
        cos, sin = torch.cos(theta)[:, None, :], torch.sin(theta)[:, None, :]
        x0, x1 = x[..., 0::2], x[..., 1::2]
        return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).flatten(-2)

    def logits(self, ids: list, cache: list | None = None) -> torch.Tensor:
        """Logits at every position of `ids`. Without a cache the whole sequence is computed (what the tests
        compare against); with one (a list that starts empty and holds each layer's keys and values), `ids`
        follow the cached tokens, as a KV-cached decoder runs (what the benchmark times)."""
        cfg, w = self.config, self.weights
        t, hd = len(ids), cfg.head_dim
        start = cache[0][0].shape[0] if cache else 0
        positions = torch.arange(start, start + t)
        x = w["token_embd.weight"][torch.tensor(ids)]
        causal = torch.ones(t, start + t, dtype=torch.bool).tril(start)
        for i in range(cfg.n_layers):
            p = f"blk.{i}."
            h = self._rms(x, w[p + "attn_norm.weight"])
            q = self._rope((h @ w[p + "attn_q.weight"].T).view(t, cfg.n_heads, hd), positions)
            k = self._rope((h @ w[p + "attn_k.weight"].T).view(t, cfg.n_kv_heads, hd), positions)
            v = (h @ w[p + "attn_v.weight"].T).view(t, cfg.n_kv_heads, hd)
            if cache is not None:
                if len(cache) <= i:
                    cache.append((k[:0], v[:0]))
                k, v = torch.cat([cache[i][0], k]), torch.cat([cache[i][1], v])
                cache[i] = (k, v)
            group = cfg.n_heads // cfg.n_kv_heads
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
            scores = torch.einsum("thd,shd->hts", q, k) / hd ** 0.5
            probs = scores.masked_fill(~causal, float("-inf")).softmax(-1)
            x = x + torch.einsum("hts,shd->thd", probs, v).reshape(t, -1) @ w[p + "attn_output.weight"].T
            h = self._rms(x, w[p + "ffn_norm.weight"])
            gated = torch.nn.functional.silu(h @ w[p + "ffn_gate.weight"].T) * (h @ w[p + "ffn_up.weight"].T)
            x = x + gated @ w[p + "ffn_down.weight"].T
        return self._rms(x, w["output_norm.weight"]) @ w["token_embd.weight"].T

    def generate(self, prompt: list, max_new_tokens: int, stop=()) -> list:
        ids, new = list(prompt), []
        while len(new) < max_new_tokens and not (new and new[-1] in stop):
            token = int(self.logits(ids)[-1].argmax())
            new.append(token)
            ids.append(token)
        return new
