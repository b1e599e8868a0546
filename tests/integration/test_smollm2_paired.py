"""SmolLM2's int8 mode on K1's matrix unit (examples/smollm2/paired_kernels.py: Q4_1 repacked into row pairs,
each block's products one `tl.dot` that runs on smt.vmadot), under QEMU with the kernel server's emulation:
the repacking exact, each kernel against the torch model of llama.cpp's arithmetic that the int8 kernels
are tested against, and the model's greedy tokens those of the int8 mode without the matrix unit."""
import numpy as np
import pytest
import torch

from tests.integration.smollm2_required import gguf_file_module, resident_growth
from tests.integration.test_smollm2_int8 import q4_1_q8_product, q8_0_q8_product, quantized

gguf_file = gguf_file_module()

from smollm2 import int8_kernels, kernels, paired_kernels  # noqa: E402
from smollm2.model import SmolLM2  # noqa: E402


@pytest.fixture(scope="module")
def gguf():
    return gguf_file.read_gguf()


def _use(monkeypatch, cpu="spacemit-x60"):
    import triton
    from spine.driver import CPUDriver
    monkeypatch.setenv("SPINE_TARGET", "riscv64")
    monkeypatch.setenv("SPINE_RISCV_CPU", cpu)
    triton.runtime.driver.set_active(CPUDriver(target="riscv64"))


def _q4_1(gguf, name: str, rows: int) -> kernels.QuantMatrix:
    tensor = gguf.tensor(name)
    return kernels.QuantMatrix("Q4_1", torch.from_numpy(np.array(tensor.data[:rows])), tensor.shape[1])


def _q8_0(gguf, rows: int) -> kernels.QuantMatrix:
    tensor = gguf.tensor("token_embd.weight")
    return kernels.QuantMatrix("Q8_0", torch.from_numpy(np.array(tensor.data[:rows])), tensor.shape[1])


def test_split_q8_0_holds_the_same_values(gguf):
    w = _q8_0(gguf, 64)
    s = paired_kernels.split(w)
    raw = w.data.reshape(64, -1, 34)
    assert torch.equal(s.values.reshape(64, -1, 32), raw[..., 2:].contiguous().view(torch.int8))
    assert torch.equal(s.d.T, raw[..., 0:2].contiguous().view(torch.float16)[..., 0])
    assert s.nbytes == w.nbytes


def test_row_pairs_hold_the_same_weights(gguf):
    """Unpacked again, the pairs are the GGUF's 4-bit values, and the scales and minimums its fp16 ones."""
    w = _q4_1(gguf, "blk.0.ffn_gate.weight", 128)
    p = paired_kernels.paired(w)
    raw = w.data.reshape(128, -1, 20)
    qs = raw[..., 4:].long()
    weights = torch.cat([qs & 15, qs >> 4], -1)                       # [rows, blocks, 32]
    pairs = p.pairs.long().transpose(0, 1)                            # [64, blocks, 32]
    assert torch.equal(torch.cat([pairs & 15, pairs >> 4]), weights)
    assert torch.equal(p.d.T, raw[..., 0:2].contiguous().view(torch.float16)[..., 0])
    assert torch.equal(p.m.T, raw[..., 2:4].contiguous().view(torch.float16)[..., 0])
    assert p.nbytes == w.nbytes
    with pytest.raises(ValueError, match="multiple of 64"):
        paired_kernels.paired(_q4_1(gguf, "blk.0.ffn_gate.weight", 96))


def test_paired_kernels_against_llama_cpps_arithmetic(gguf, monkeypatch):
    """One token (its dots on smt.vmadot) and 5 (the packed matmul's tiles), the residual added, the head's
    Q8_0 blocks, and the SwiGLU with its output quantized: within fp32 order of the float64 sums of the same
    integers, and the SwiGLU's blocks those the int8 kernels make."""
    _use(monkeypatch)
    assert paired_kernels.matrix_rows()
    torch.manual_seed(0)
    w, up = _q4_1(gguf, "blk.0.ffn_gate.weight", 128), _q4_1(gguf, "blk.0.ffn_up.weight", 128)
    pw, pu = paired_kernels.paired(w), paired_kernels.paired(up)
    x, res = torch.randn(5, 576) * 3, torch.randn(5, 128)
    x[1, 32:64] = 0.0
    for rows in (1, 5):
        torch.testing.assert_close(paired_kernels.linear(x[:rows], pw, residual=res[:rows]),
                                   q4_1_q8_product(x[:rows], w) + res[:rows], rtol=1e-5, atol=1e-4)
    table = _q8_0(gguf, 128)
    torch.testing.assert_close(paired_kernels.linear(x[:1], paired_kernels.split(table)),
                               q8_0_q8_product(x[:1], table), rtol=1e-4, atol=1e-3)
    ids = torch.tensor([5, 0, 127], dtype=torch.int32)
    assert torch.equal(paired_kernels.embedding(ids, paired_kernels.split(table)), kernels.embedding(ids, table))
    norm = torch.randn(576)
    for rows in (1, 3):
        mine = paired_kernels.swiglu(x[:rows], norm, pw, pu, 1e-5)
        theirs = int8_kernels.swiglu(x[:rows], norm, w, up, 1e-5)
        torch.testing.assert_close(mine.values, theirs.values, rtol=1e-5, atol=1e-5)
        assert torch.equal(mine.q, int8_kernels.quantize(mine.values).q)
    q, d, s = quantized(x[:1])
    assert torch.equal(int8_kernels.quantize(x[:1]).d, d)


def test_refuses_what_it_cannot_take(gguf, monkeypatch):
    _use(monkeypatch)
    w = _q4_1(gguf, "blk.0.ffn_gate.weight", 64)
    with pytest.raises(ValueError, match="repack it first"):
        paired_kernels.linear(torch.randn(1, 576), w)
    with pytest.raises(ValueError, match="one row and no residual"):
        paired_kernels.linear(torch.randn(2, 576), paired_kernels.split(_q8_0(gguf, 64)))
    with pytest.raises(ValueError, match="only Q8_0"):
        paired_kernels.split(w)


def test_the_model_repacks_only_where_the_unit_is(gguf, monkeypatch):
    """spacemit-x60 (K1's IME): the int8 mode pairs its Q4_1 matrices and splits its Q8_0 table, in the
    same bytes; without the unit, or without int8 activations, the GGUF's blocks stay."""
    _use(monkeypatch)
    model = SmolLM2.load(gguf, capacity=8, n_layers=1, int8=True)
    assert model.paired and model.embed.kind == "Q8_0"
    assert model.weight_bytes == SmolLM2.load(gguf, capacity=8, n_layers=1).weight_bytes
    assert not SmolLM2.load(gguf, capacity=8, n_layers=1).paired
    monkeypatch.setenv("SPINE_MATRIX_UNIT", "0")
    assert not SmolLM2.load(gguf, capacity=8, n_layers=1, int8=True).paired


def test_greedy_tokens_on_the_matrix_unit(gguf, monkeypatch):
    """Two layers, a prompt and 3 new tokens: the same tokens as the int8 mode's RVV kernels give."""
    from smollm2.tokenizer import build_tokenizer
    ids = build_tokenizer(gguf.fields).encode("The capital of France is")
    _use(monkeypatch, "generic-rv64")
    expected = SmolLM2.load(gguf, capacity=32, n_layers=2, int8=True).generate(ids, 3)
    _use(monkeypatch)
    model = SmolLM2.load(gguf, capacity=32, n_layers=2, int8=True)
    assert model.paired
    assert model.generate(ids, 3) == expected


def test_repacking_keeps_the_weights_once(tmp_path):
    """In a fresh process: loading the model for K1's unit repacks every matrix, and gives the mapped file's
    pages under them back (GGUFModel.release), so what loading adds stays within the bound the host model
    keeps, 1.5x the GGUF plus the KV cache. (The kernels then run in QEMU's process, not this one.)"""
    grown, cache, file_bytes = resident_growth("riscv64", "", """
        model = SmolLM2.load(capacity=256, int8=True)
        assert model.paired
    """, env={"SPINE_RISCV_CPU": "spacemit-x60"})
    assert grown <= 1.5 * file_bytes + cache, (grown, cache, file_bytes)
