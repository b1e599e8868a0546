"""SmolLM2-135M (examples/smollm2) on Spine's kernels, against an fp32 torch reference computed from the same
GGUF's weights dequantized by the `gguf` package: greedy tokens identical, every op of the forward pass a
Spine kernel, the weights kept in their blocks. The host runs the whole model; riscv64, under QEMU, a prefix
of its layers (the same kernels, fewer launches)."""
import os
import platform

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from tests.integration.smollm2_required import gguf_file_module, resident_growth

gguf_file = gguf_file_module()

from smollm2 import kernels  # noqa: E402
from smollm2.model import SmolLM2  # noqa: E402
from smollm2.reference import Reference  # noqa: E402
from smollm2.tokenizer import build_tokenizer  # noqa: E402

PROMPTS = ["The capital of France is", "def fibonacci(n):\n", "What is a compiler?"]


@pytest.fixture(scope="module")
def gguf():
    return gguf_file.read_gguf()


@pytest.fixture(scope="module")
def tokenizer(gguf):
    return build_tokenizer(gguf.fields)


@pytest.fixture(scope="module")
def reference(gguf):
    return Reference.load(gguf)


@pytest.fixture(scope="module")
def host_model(gguf):
    """The whole model, loaded once for the module (its kernels are compiled for whichever target is active
    when it runs; the tests that use it set the host's)."""
    return SmolLM2.load(gguf, capacity=256)


def test_tokenizer_matches_llama_cpp(tokenizer):
    # the ids llama.cpp's llama-tokenize gives for these strings on the same GGUF
    assert tokenizer.encode("The capital of France is") == [504, 3575, 282, 4649, 314]
    assert tokenizer.encode("In 2024, 1234 cats said: hello  world!!") == [
        788, 216, 34, 32, 34, 36, 28, 216, 33, 34, 35, 36, 7680, 1137, 42, 33662, 216, 905, 10095]
    assert tokenizer.encode("Compilers for RISC-V vector machines: éclair café 東京") == [
        13317, 33972, 327, 428, 27584, 29, 70, 8431, 6120, 42, 26411, 36654, 37366, 17097, 247, 126, 16736, 122]
    chat = tokenizer.encode(tokenizer.chat("Hi"))
    assert chat[0] == tokenizer.bos_id and chat[-4:] == tokenizer.encode("<|im_start|>assistant\n")
    assert tokenizer.decode(tokenizer.encode("é 東京 <|im_end|>")) == "é 東京 <|im_end|>"


@pytest.mark.parametrize("prompt", PROMPTS)
def test_greedy_tokens_match_fp32_reference_host(host_driver, host_model, tokenizer, reference, prompt):
    model = host_model
    ids = tokenizer.encode(tokenizer.chat(prompt) if "?" in prompt else prompt)
    expected = reference.generate(ids, 32)
    assert model.generate(ids, 32) == expected
    if prompt.startswith("The capital"):
        assert tokenizer.decode(expected).startswith(" Paris")


def test_riscv64_prefix_of_layers_matches_reference(riscv64_driver, gguf, tokenizer):
    model = SmolLM2.load(gguf, capacity=64, n_layers=2)
    ids = tokenizer.encode("The capital of France is")
    expected = Reference.load(gguf, n_layers=2).generate(ids, 3)
    assert model.generate(ids, 3) == expected


class _Ops(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.seen = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen.add(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


# allocation and views: what the host code may ask torch for
NOT_COMPUTE = {"empty", "empty_like", "empty_strided", "select", "slice", "view", "alias", "detach", "lift_fresh"}


def test_forward_runs_no_torch_compute(host_driver, host_model):
    model = host_model
    model.reset()
    prompt, token = torch.tensor([1, 504, 3575], dtype=torch.int32), torch.tensor([282], dtype=torch.int32)
    with _Ops() as ops:
        model.forward(prompt)
        kernels.argmax(model.forward(token))
    assert ops.seen and ops.seen <= NOT_COMPUTE, ops.seen - NOT_COMPUTE


def test_weights_stay_quantized(gguf, host_model):
    model = host_model
    assert {layer.qkv.kind for layer in model.layers} == {"Q4_1"} and model.embed.kind == "Q8_0"
    assert model.weight_bytes <= os.path.getsize(gguf.path)


def test_resident_memory_within_the_file_and_cache(tmp_path):
    """In a fresh process: what loading and running the model adds to the resident set stays within 1.5x the
    GGUF plus the KV cache. Measured from after a one-layer model has compiled the kernels: the compiler's
    own memory is not the model's."""
    grown, cache, file_bytes = resident_growth("host", """
        warm = SmolLM2.load(capacity=16, n_layers=1)
        warm.generate([1, 504, 3575], 2)
        del warm
    """, """
        model = SmolLM2.load(capacity=256)
        model.generate([1, 504, 3575], 2)
    """)
    assert grown <= 1.5 * file_bytes + cache, (grown, cache, file_bytes)


def test_prompt_beyond_the_cache_is_a_clear_error(host_driver, gguf):
    model = SmolLM2.load(gguf, capacity=8, n_layers=1)
    with pytest.raises(ValueError, match="exceed the KV cache's 8 tokens"):
        model.generate(list(range(6)), 4)
    model.reset()
    model.forward(torch.arange(8, dtype=torch.int32))
    with pytest.raises(ValueError, match="8 cached \\+ 1 new tokens exceed"):
        model.forward(torch.tensor([1], dtype=torch.int32))
    with pytest.raises(ValueError, match="exceeds the model's context"):
        SmolLM2.load(gguf, capacity=gguf.config.context + 1, n_layers=1)


def test_quantized_kernels_against_dequantized_weights(target, gguf, monkeypatch):
    """Each kernel on odd row counts: Q4_1 and Q8_0 products (with the fused norm and residual), the embedding,
    against the `gguf` package's dequantization."""
    gate, head = gguf.tensor("blk.0.ffn_gate.weight"), gguf.tensor("token_embd.weight")
    w = torch.from_numpy(gguf_file.dequantize(gate))
    q = kernels.QuantMatrix("Q4_1", torch.from_numpy(np.array(gate.data[:70])), gate.shape[1])
    x, res, norm = torch.randn(5, 576), torch.randn(5, 70), torch.randn(576)
    xn = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * norm
    torch.testing.assert_close(kernels.linear(x, q, residual=res), x @ w[:70].T + res, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(kernels.linear(x[:1], q, norm=norm, eps=1e-5), xn[:1] @ w[:70].T, rtol=1e-4, atol=1e-4)
    e = torch.from_numpy(gguf_file.dequantize(head)[:300])
    table = kernels.QuantMatrix("Q8_0", torch.from_numpy(np.array(head.data[:300])), head.shape[1])
    torch.testing.assert_close(kernels.linear(x, table, norm=norm, eps=1e-5), xn @ e.T, rtol=1e-4, atol=1e-4)
    # the one-row head: a block a step on riscv64, steps of blocks on x86, and both ways on either
    assert kernels._block_sums() == (target == "riscv64" or platform.machine() == "riscv64")
    for block_sums in (False, True):
        monkeypatch.setattr(kernels, "_block_sums", lambda: block_sums)
        torch.testing.assert_close(kernels.linear(x[3:4], table, norm=norm, eps=1e-5), xn[3:4] @ e.T, rtol=1e-4,
                                   atol=1e-4)
    ids = torch.tensor([299, 0, 17], dtype=torch.int32)
    torch.testing.assert_close(kernels.embedding(ids, table), e[ids.long()])
    logits = torch.randn(1000)
    logits[[3, 700]] = 50.0
    assert int(kernels.argmax(logits)) == 3


def _use(target, monkeypatch):
    import triton
    from spine.driver import CPUDriver
    monkeypatch.setenv("SPINE_TARGET", target)
    triton.runtime.driver.set_active(CPUDriver(target=target))


@pytest.fixture
def host_driver(monkeypatch):
    _use("host", monkeypatch)


@pytest.fixture
def riscv64_driver(monkeypatch):
    _use("riscv64", monkeypatch)


def test_reference_with_a_cache_matches_it_without(gguf):
    """The benchmark's eager torch decoder (the reference with a KV cache) computes what the tests compare
    against."""
    ref = Reference.load(gguf, n_layers=2)
    ids = [504, 3575, 282, 4649, 314]
    cache = []
    prefix = ref.logits(ids[:3], cache)
    step = ref.logits(ids[3:], cache)
    whole = ref.logits(ids)
    torch.testing.assert_close(torch.cat([prefix, step]), whole, rtol=1e-4, atol=1e-4)
