"""triton-cpu's `tl.extra.cpu.vnni_decode` (spine/language/cpu/vnni.py), in a kernel that imports nothing
but triton.language, against the packing done in torch."""
import pytest
import torch
import triton
import triton.language as tl


@triton.jit
def decode_kernel(packed_ptr, out_ptr, ROWS: tl.constexpr, COLS: tl.constexpr, PACK: tl.constexpr):
    r = tl.arange(0, ROWS)[:, None]
    c = tl.arange(0, COLS)[None, :]
    packed = tl.load(packed_ptr + r * COLS + c)
    decoded = tl.extra.cpu.vnni_decode(packed)
    k = tl.arange(0, ROWS * PACK)[:, None]
    n = tl.arange(0, COLS // PACK)[None, :]
    tl.store(out_ptr + k * (COLS // PACK) + n, decoded)


def _pairs_packed(b: torch.Tensor) -> torch.Tensor:
    """packed[r, 2n + j] = b[2r + j, n]"""
    k, n = b.shape
    return b.reshape(k // 2, 2, n).permute(0, 2, 1).reshape(k // 2, 2 * n)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.int8])
def test_a_packed_operand_decodes_to_its_layout(target, dtype):
    k, n = 16, 8
    b = (torch.randn(k, n) * 10).to(dtype)
    packed = _pairs_packed(b)
    if dtype == torch.int8:      # two rounds of the 16-bit step, as triton-cpu decodes 8-bit values
        packed = _pairs_packed(packed)
    pack = 4 if dtype == torch.int8 else 2
    out = torch.empty_like(b)
    decode_kernel[(1,)](packed, out, ROWS=k // pack, COLS=n * pack, PACK=pack)
    assert torch.equal(out, b)
