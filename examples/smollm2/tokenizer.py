"""The GGUF's own tokenizer as a `tokenizers` byte-level BPE: vocabulary and merges from the file, the
pre-tokenizer llama.cpp uses for `tokenizer.ggml.pre = "smollm"` (each digit alone, then GPT-2's
byte-level split), control tokens (`<|im_start|>`, ...) matched whole. No network, no Hugging Face hub."""
from dataclasses import dataclass

import jinja2

CONTROL = 3  # llama.cpp's token type for control tokens
PRE_TOKENIZERS = ("smollm", "gpt2")


@dataclass
class GGUFTokenizer:
    backend: object  # tokenizers.Tokenizer
    bos_id: int
    eos_id: int
    chat_template: str | None

    def encode(self, text: str) -> list:
        return self.backend.encode(text, add_special_tokens=False).ids

    def decode(self, ids, skip_special=False) -> str:
        return self.backend.decode(list(ids), skip_special_tokens=skip_special)

    def chat(self, user_text: str) -> str:
        """The prompt the GGUF's chat template makes of one user message, ready for the assistant."""
        if not self.chat_template:
            raise ValueError("this GGUF has no tokenizer.chat_template")
        template = jinja2.Environment().from_string(self.chat_template)
        return template.render(messages=[{"role": "user", "content": user_text}], add_generation_prompt=True)


def build_tokenizer(fields: dict) -> GGUFTokenizer:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    if fields.get("tokenizer.ggml.model") != "gpt2":
        raise ValueError(f"tokenizer model {fields.get('tokenizer.ggml.model')!r}; only byte-level BPE (gpt2)")
    pre = fields.get("tokenizer.ggml.pre", "gpt2")
    if pre not in PRE_TOKENIZERS:
        raise ValueError(f"pre-tokenizer {pre!r} is not one of {PRE_TOKENIZERS}")
    tokens = fields["tokenizer.ggml.tokens"]
    vocab = {token: i for i, token in enumerate(tokens)}
    merges = [tuple(merge.split(" ", 1)) for merge in fields["tokenizer.ggml.merges"]]
    backend = Tokenizer(models.BPE(vocab, merges, fuse_unk=False))
    split_bytes = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    backend.pre_tokenizer = (pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), split_bytes])
                             if pre == "smollm" else split_bytes)
    backend.decoder = decoders.ByteLevel()
    kinds = fields.get("tokenizer.ggml.token_type", [])
    backend.add_special_tokens([tokens[i] for i, kind in enumerate(kinds) if kind == CONTROL])
    return GGUFTokenizer(backend, int(fields.get("tokenizer.ggml.bos_token_id", -1)),
                         int(fields.get("tokenizer.ggml.eos_token_id", -1)), fields.get("tokenizer.chat_template"))
