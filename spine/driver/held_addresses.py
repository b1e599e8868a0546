"""Addresses held inside a launch's arguments: what a kernel that runs in another address space needs
translated.

A kernel may dereference integers it reads: a table of tensors' `data_ptr()`s (triton's grouped GEMM
tutorial, MoE kernels) or an address passed as an integer argument. The compile names the arguments those
integers come from (KernelFacts.address_args). In this process they are the tensors' own addresses; under
QEMU the kernel sees copies of memory in the server's arena, so the launcher must copy each tensor such an
address points into there as well, and hand the kernel the copy's address instead (qemu.arena_layout).

Which tensor an address points into is found among the CPU tensors alive in this process (the garbage
collector's list of objects): an address is the data of some tensor, or the launch cannot know how much
memory lies behind it. An entry that points into no live tensor is left as it is (a table may hold
offsets beside addresses, or unused entries).
"""
from __future__ import annotations

import bisect
import gc
import warnings
from dataclasses import dataclass

from .arguments import Arguments

_WORD = 8   # addresses are 64-bit: a table of them has 8-byte entries, an argument holding one is 64-bit
_ADDRESS_TYPES = ("i64", "u64")


@dataclass(frozen=True)
class HeldAddress:
    param: int          # the argument that holds it
    word: int | None    # the host address of the table entry that holds it; None: the argument's own value
    value: int          # the address
    lo: int             # [lo, hi): the storage of the live tensor it points into
    hi: int


def held_addresses(args: Arguments) -> list[HeldAddress]:
    """Every address the launch's address-holding arguments hold that points into a live CPU tensor."""
    if not args.addresses:
        return []
    storages = _live_storages()
    found = []
    for index in args.addresses:
        param, value = args.params[index], args.values[index]
        if param.is_pointer:
            words = _table_words(value) if param.pointee in _ADDRESS_TYPES else []
        else:
            words = [(None, value % (1 << 64))] if param.ty in _ADDRESS_TYPES else []
        for word, address in words:
            storage = _storage_holding(storages, address)
            if storage is not None:
                found.append(HeldAddress(index, word, address, *storage))
    return found


def _table_words(table) -> list[tuple[int, int]]:
    """(host address, value) of each entry of an int64 tensor."""
    import torch
    if table.numel() == 0:
        return []
    first = table.untyped_storage().data_ptr()
    positions = torch.as_strided(torch.arange(table.untyped_storage().nbytes() // _WORD), table.shape,
                                 table.stride(), table.storage_offset())
    return [(first + _WORD * p, v % (1 << 64)) for p, v in zip(positions.reshape(-1).tolist(),
                                                                 table.reshape(-1).tolist())]


def _live_storages() -> list[tuple[int, int]]:
    """[lo, hi) of each CPU tensor storage alive in this process, sorted."""
    import torch
    spans = {}
    with warnings.catch_warnings():   # a fake tensor's storage answers 0, with a warning
        warnings.simplefilter("ignore")
        for obj in gc.get_objects():
            _add_storage(spans, obj, torch.Tensor)
    return sorted((lo, lo + size) for lo, size in spans.items())


def _add_storage(spans: dict, obj, tensor_type) -> None:
    """Records the memory of `obj`'s storage if it is a CPU tensor that has some."""
    # type(), not isinstance(): isinstance also asks objects their __class__, which some lazy module
    # attributes answer with a deprecation warning
    if not issubclass(type(obj), tensor_type) or obj.device.type != "cpu":
        return
    try:
        storage = obj.untyped_storage()
        lo, size = storage.data_ptr(), storage.nbytes()
    except (RuntimeError, NotImplementedError):   # no memory to ask for: sparse, meta, traced by torch.compile
        return
    if lo and size:
        spans[lo] = max(spans.get(lo, 0), size)


def _storage_holding(storages: list[tuple[int, int]], address: int) -> tuple[int, int] | None:
    """The storage `address` lies in (or just past the end of: a view ending there), if any."""
    at = bisect.bisect_right(storages, (address, float("inf"))) - 1
    if at >= 0 and storages[at][0] <= address <= storages[at][1]:
        return storages[at]
    return None
