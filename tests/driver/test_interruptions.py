"""Ctrl-C (SIGINT) at random points of compile, launch and copy-back, in a loop, on both targets and the
stand-in board: after each interruption the process's next compile and launch give correct results, and
triton's cache holds no wrong entry (every kernel compiled on the way, loaded again from the disk cache,
computes what it should)."""
import os
import random
import signal
import threading

import pytest
import torch
import triton
import triton.language as tl

from tests.driver.test_remote import board  # noqa: F401 (the stand-in board fixture)

ROUNDS = int(os.environ.get("SPINE_TEST_INTERRUPT_ROUNDS", "10"))
VARIANTS = max(4, ROUNDS // 2)   # so that about half the rounds compile a new variant: Ctrl-C lands in compiles too


@triton.jit
def scaled_sum_kernel(x_ptr, y_ptr, out_ptr, n, SCALE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x * SCALE + tl.sqrt(y), mask=mask)


def _launch(variant: int, x, y, out):
    n = x.numel()
    scaled_sum_kernel[(triton.cdiv(n, 512),)](x, y, out, n, SCALE=variant + 2, BLOCK=512)


def _expected(variant: int, x, y):
    return x * (variant + 2) + torch.sqrt(y)


@pytest.fixture
def sigint_raises():
    """A process started in the background without job control inherits SIGINT ignored, and Python then
    installs no KeyboardInterrupt handler: install it for the test."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def _interrupted_rounds(seed: int) -> dict:
    """Runs ROUNDS launches of random variants, each with a SIGINT sent at a random moment (during the
    compile of a new variant, the launch, the copy-back, or after the call returned); checks the next
    launch after each. Returns how each round ended."""
    rng = random.Random(seed)
    x, y = torch.rand(40_000), torch.rand(40_000)
    ended = {"interrupted": 0, "completed": 0, "compiles": 0}   # interrupted: anywhere, after the call too
    seen = set()
    for _ in range(ROUNDS):
        variant = rng.randrange(VARIANTS)
        ended["compiles"] += variant not in seen
        seen.add(variant)
        out = torch.zeros_like(x)
        timer = threading.Timer(rng.uniform(0.0, 0.4), os.kill, (os.getpid(), signal.SIGINT))
        try:
            timer.start()
            try:
                _launch(variant, x, y, out)
                ended["completed"] += 1
                torch.testing.assert_close(out, _expected(variant, x, y))
            finally:
                timer.join()   # the signal, if it comes after the call, lands here
        except KeyboardInterrupt:
            ended["interrupted"] += 1
        out = torch.zeros_like(x)
        _launch(variant, x, y, out)
        torch.testing.assert_close(out, _expected(variant, x, y))
    return ended


def _every_cached_variant_is_right():
    """Forgets the kernels loaded in this process, so each variant is loaded from triton's disk cache."""
    scaled_sum_kernel.device_caches.clear()
    x, y = torch.rand(3000), torch.rand(3000)
    for variant in range(VARIANTS):
        out = torch.zeros_like(x)
        _launch(variant, x, y, out)
        torch.testing.assert_close(out, _expected(variant, x, y))


@pytest.mark.parametrize("seed", [1])
def test_ctrl_c_anywhere_leaves_a_working_process(target, fresh_cache, sigint_raises, seed):
    ended = _interrupted_rounds(seed)
    print(f"{target}: {ended}")
    assert ended["interrupted"] > 0, ended
    _every_cached_variant_is_right()


def test_ctrl_c_anywhere_on_the_board(board, fresh_cache, sigint_raises):  # noqa: F811
    ended = _interrupted_rounds(2)
    print(f"board: {ended}")
    assert ended["interrupted"] > 0, ended
    _every_cached_variant_is_right()
