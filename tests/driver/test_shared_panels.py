"""The packed panels a thread keeps for the rest of a launch (cpp/shared_panels.c), called through the host
runtime as a kernel calls it: the first request for a source and packing is to be packed, later ones in the
same launch on the same thread find it (the lowest bit of the answer), a new launch or another thread finds
nothing, buffers are 64-byte aligned and their contents stay; past the slots or the byte budget the panel
packed longest ago goes; a launch that deals its programs to several threads one at a time keeps nothing
(the answer 0). Keys that share a hash bucket are all found."""
from __future__ import annotations

import ctypes
import threading

import pytest

from spine.driver.toolchain import host_runtime_library

ENTRY = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_void_p), *([ctypes.c_int32] * 6))
SLOTS, BUDGET = 64, 8 << 20          # cpp/shared_panels.h


@pytest.fixture(scope="module")
def runtime():
    lib = ctypes.CDLL(host_runtime_library(), mode=ctypes.RTLD_GLOBAL)
    lib.spine_shared_panel.argtypes = [ctypes.c_uint64] * 5
    lib.spine_shared_panel.restype = ctypes.c_uint64
    lib.spine_host_run_grid.argtypes = [ctypes.c_void_p, ctypes.c_void_p] + [ctypes.c_int32] * 4 + [ctypes.c_int64]
    lib.spine_grid_launch_number.restype = ctypes.c_uint64
    lib.spine_grid_run_length.restype = ctypes.c_int64
    return lib


def _launch(runtime, programs: int = 2, threads: int = 1, body=lambda pid: None) -> None:
    """A launch (on one thread, its programs run one after another: panels are kept)."""
    entry = ENTRY(lambda args, x, y, z, nx, ny, nz: body(x))
    assert runtime.spine_host_run_grid(ctypes.cast(entry, ctypes.c_void_p), None, programs, 1, 1, threads, 0) == 0


def _ask(runtime, source: int, layout: int = 7, bytes_: int = 4096, steps=(256, 1)) -> tuple:
    got = runtime.spine_shared_panel(source, steps[0], steps[1], layout, bytes_)
    assert got != 0
    return got & ~1, bool(got & 1)


def test_programs_of_a_launch_on_one_thread_pack_a_source_once(runtime):
    answers = []
    _launch(runtime, 3, body=lambda pid: answers.append(_ask(runtime, 0x1000)))
    (first, packed_before), *later = answers
    assert not packed_before and first % 64 == 0
    assert later == [(first, True), (first, True)]


def test_a_new_launch_finds_nothing_kept(runtime):
    before = runtime.spine_grid_launch_number()
    _launch(runtime, body=lambda pid: _ask(runtime, 0x2000))
    assert runtime.spine_grid_launch_number() == before + 1
    seen = []
    _launch(runtime, body=lambda pid: seen.append(_ask(runtime, 0x2000)))
    assert not seen[0][1] and seen[1] == (seen[0][0], True)


def test_each_thread_keeps_its_own(runtime):
    _launch(runtime)
    here, _ = _ask(runtime, 0x3000)
    there = []
    thread = threading.Thread(target=lambda: there.append(_ask(runtime, 0x3000)))
    thread.start()
    thread.join()
    assert there[0][1] is False and there[0][0] != here
    assert _ask(runtime, 0x3000) == (here, True)


def test_the_key_is_the_source_its_strides_and_the_packing(runtime):
    _launch(runtime)
    base, _ = _ask(runtime, 0x4000)
    for other in (dict(source=0x4040), dict(layout=8), dict(steps=(512, 1)), dict(steps=(256, 2))):
        args = dict(source=0x4000, layout=7, steps=(256, 1)) | other
        address, found = _ask(runtime, args["source"], args["layout"], steps=args["steps"])
        assert not found and address != base, other
    assert _ask(runtime, 0x4000) == (base, True)


def test_a_kept_panel_holds_what_was_packed_into_it(runtime):
    _launch(runtime)
    address, _ = _ask(runtime, 0x5000, bytes_=256)
    ctypes.memmove(address, bytes(range(256)), 256)
    for source in range(0x6000, 0x6000 + 40 * 64, 64):       # other panels between
        _ask(runtime, source, bytes_=256)
    again, found = _ask(runtime, 0x5000, bytes_=256)
    assert found and again == address and ctypes.string_at(address, 256) == bytes(range(256))


def test_past_the_slots_the_panel_packed_longest_ago_goes(runtime):
    _launch(runtime)
    sources = [0x10000 + 64 * source for source in range(SLOTS)]
    for source in sources:
        _ask(runtime, source, bytes_=64)
    assert all(_ask(runtime, source, bytes_=64)[1] for source in reversed(sources))   # every one kept
    _ask(runtime, 0x90000, bytes_=64)                         # one more: the first packed goes
    assert not _ask(runtime, sources[0], bytes_=64)[1]        # (packed again, in the second's place)
    assert all(_ask(runtime, source, bytes_=64)[1] for source in sources[2:])


def test_many_keys_in_few_buckets_are_all_found(runtime):
    """Far more sources than fit one per bucket of the table, asked for out of order: each is found, and a
    panel replaced leaves the others' chains whole."""
    _launch(runtime)
    sources = [0x100000 + 4096 * 256 * source for source in range(SLOTS)]   # alike in their low bits
    addresses = {source: _ask(runtime, source, bytes_=64)[0] for source in sources}
    for source in sources[::-7] + sources[1::3]:
        assert _ask(runtime, source, bytes_=64) == (addresses[source], True)
    _ask(runtime, 0x777000, bytes_=64)                        # replaces the first
    assert not _ask(runtime, sources[0], bytes_=64)[1]
    for source in sources[2:]:
        assert _ask(runtime, source, bytes_=64) == (addresses[source], True)


def test_past_the_byte_budget_older_panels_go(runtime):
    _launch(runtime)
    quarter = BUDGET // 4
    for source in range(4):
        _ask(runtime, 0x20000 + 64 * source, bytes_=quarter)
    _ask(runtime, 0x30000, bytes_=quarter)                    # a fifth quarter: the first goes
    assert _ask(runtime, 0x20040, bytes_=quarter)[1]
    assert not _ask(runtime, 0x20000, bytes_=quarter)[1]
    huge, found = _ask(runtime, 0x40000, bytes_=2 * BUDGET)  # larger than the budget alone: still given
    assert not found
    ctypes.memset(huge + 2 * BUDGET - 64, 1, 64)


def test_a_new_launch_packs_into_the_buffers_of_the_one_before(runtime):
    """A kernel launched again packs its panels into the same buffers in the same order: no allocation."""
    _launch(runtime)
    before = [_ask(runtime, source, bytes_=1024)[0] for source in range(0x50000, 0x50000 + 4 * 64, 64)]
    _launch(runtime)
    again = [_ask(runtime, source, bytes_=1024) for source in range(0x50000, 0x50000 + 4 * 64, 64)]
    assert again == [(address, False) for address in before]


def test_programs_dealt_one_at_a_time_to_several_threads_keep_nothing(runtime):
    answers = []
    _launch(runtime, 4, threads=2, body=lambda pid: answers.append(runtime.spine_shared_panel(0x80000, 256, 1, 7, 4096)))
    assert answers == [0, 0, 0, 0]
    assert runtime.spine_grid_run_length() == 1


def test_a_thread_taking_runs_of_programs_keeps_panels(runtime):
    """64 programs on two threads: runs of four consecutive ones (the grid's chunks, an eighth of a thread's
    share)."""
    answers = []
    _launch(runtime, 64, threads=2, body=lambda pid: answers.append(runtime.spine_shared_panel(0x90000, 256, 1, 7, 4096)))
    assert runtime.spine_grid_run_length() == 4
    assert all(answers) and any(a & 1 for a in answers)


def test_random_requests_find_what_was_packed(runtime):
    """Requests in random order over more keys than slots, of several sizes, across launches: a panel
    reported as packed before holds what that key's packing wrote into it, in this launch."""
    import random
    rng = random.Random(5)
    keys = [(0x200000 + 64 * rng.randrange(200), rng.choice((64, 192, 4096))) for _ in range(150)]
    for launch in range(3):
        _launch(runtime)
        written = {}
        for step in range(3000):
            source, size = rng.choice(keys)
            address, found = _ask(runtime, source, layout=size, bytes_=size)   # a packing has one size
            tag = (source * 7 + size + launch).to_bytes(8, "little")
            if found:
                assert (source, size) in written and ctypes.string_at(address, 8) == tag, (launch, step)
            else:
                ctypes.memmove(address, tag, 8)
                ctypes.memset(address + 8, step & 0xFF, size - 8)
                written[source, size] = address
