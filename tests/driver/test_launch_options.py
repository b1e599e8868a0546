"""Launch options kernels written for other backends pass (spine/options.py): triton-cpu's thread cap, the
GPU backends' tuning knobs (accepted, ignored, one warning per name), and a misspelt option, still an
error that names it."""
import warnings

import pytest
import torch
import triton
import triton.language as tl

from tests.kernels import add_kernel


@triton.jit
def overlap_kernel(active_ptr, peak_ptr, out_ptr, spins):
    """Each program counts itself in, works a while, records how many others were in, and leaves."""
    others = tl.atomic_add(active_ptr, 1)
    x = tl.program_id(0).to(tl.float32)
    for _ in range(spins):
        x = x * 1.0000001 + 1.0
    tl.store(out_ptr + tl.program_id(0), x)
    tl.atomic_max(peak_ptr, others)
    tl.atomic_add(active_ptr, -1)


def _peak_overlap(spins: int, **options) -> int:
    active, peak = torch.zeros(1, dtype=torch.int32), torch.zeros(1, dtype=torch.int32)
    out = torch.empty(8)
    overlap_kernel[(8,)](active, peak, out, spins, **options)
    assert active.item() == 0
    return peak.item()


@pytest.mark.parametrize("name", ["num_cpu_threads", "num_threads"])
def test_a_kernel_asking_for_one_thread_runs_its_programs_one_at_a_time(target, monkeypatch, name):
    monkeypatch.setenv("SPINE_NUM_THREADS", "4")
    spins = 400_000 if target == "riscv64" else 2_000_000
    assert _peak_overlap(spins, **{name: 1}) == 0
    # the same launch without the cap runs programs side by side on 4 threads
    assert _peak_overlap(spins) > 0


@pytest.mark.parametrize("value", [-1, 1.5, True])
def test_a_thread_count_that_is_not_one_is_refused(target, value):
    with pytest.raises(ValueError, match="num_cpu_threads must be a whole number"):
        _peak_overlap(1, num_cpu_threads=value)


def test_the_thread_cap_reaches_the_fast_paths_settings():
    from spine.driver.settings import runtime_settings
    assert runtime_settings(3).threads == 3
    assert runtime_settings(0).threads == runtime_settings().threads


def test_gpu_only_options_are_accepted_ignored_and_warned_about_once(target):
    from spine import options
    options._warned.clear()
    n = 3000
    x, y = torch.rand(n), torch.rand(n)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            out = torch.empty(n)
            add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024, matrix_instr_nonkdim=16, waves_per_eu=2,
                                                kpack=2, maxnreg=128, assume_in_bounds=True)
            torch.testing.assert_close(out, x + y)
    named = sorted(str(w.message).split("option ")[1].split("=")[0] for w in caught
                   if "tunes code for GPUs" in str(w.message))
    assert named == ["kpack", "matrix_instr_nonkdim", "maxnreg", "waves_per_eu"]


def test_gpu_only_options_leave_the_compile_key_alone():
    from spine.options import CPUOptions
    assert CPUOptions(matrix_instr_nonkdim=16, kpack=2).hash() == CPUOptions().hash()
    assert CPUOptions(num_cpu_threads=2).hash() != CPUOptions().hash()


def test_a_misspelt_option_is_an_error_that_names_it(target):
    x = torch.rand(16)
    with pytest.raises(KeyError, match="num_wraps"):
        add_kernel[(1,)](x, x, torch.empty(16), 16, BLOCK=16, num_wraps=4)


def test_options_read_back_from_a_compiled_kernels_metadata_are_not_warned_about():
    """The alias-safe recompile passes the metadata's options back; JSON made cluster_dims a list."""
    from spine import options
    options._warned.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        options.warn_ignored({"cluster_dims": [1, 1, 1], "kpack": None})
    assert not caught
