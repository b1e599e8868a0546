"""What tests/flaggems/summary.py counts as FlagGems' own failures without an eager rerun: torch refusing,
on this machine, what FlagGems' code asks of it, with no kernel or Spine involved."""
import pytest
import torch

from tests.flaggems.summary import TORCH_REFUSES


@pytest.mark.skipif(torch.accelerator.is_available(), reason="this machine has an accelerator")
def test_torch_refuses_to_pin_memory_without_an_accelerator():
    message = next(text for text in TORCH_REFUSES if "accelerator" in text)
    with pytest.raises(RuntimeError, match=message):
        torch.tensor([1, 2, 3]).pin_memory()   # FlagGems' broadcast_to, argsort, ... on a CPU tensor


def test_torch_has_no_named_tensors():
    assert any("names" in text for text in TORCH_REFUSES)
    with pytest.raises(AttributeError, match="'Tensor' object has no attribute 'names'"):
        torch.randn(3).names                   # FlagGems' median
