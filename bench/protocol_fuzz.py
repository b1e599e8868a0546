"""The kernel server protocol fuzzer, the long run: the properties of tests/driver/test_protocol_fuzz.py
(hostile frames to the server in QEMU mode and in stream mode; no crash, no hang past the timeout, no
arena byte written that an accepted request did not write, a clear error for each bad request) for many
thousands of frames, with random seeds.

    python bench/protocol_fuzz.py --examples 300 --frames 20

Prints, per mode and in all: frames sent, ok and error replies, server restarts (after requests whose
length lies, or cut short by the stream's end), crashes, hangs and wrong replies; the exit status is 1
when any crash, hang or wrong reply was seen."""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=300, help="hypothesis examples per mode")
    parser.add_argument("--frames", type=int, default=20, help="frames per example")
    parser.add_argument("--modes", default="qemu,stream")
    args = parser.parse_args()

    from tests.driver.test_kernel_server import poke_so
    from tests.driver.test_protocol_fuzz import Stats, fuzz_server

    poke = poke_so()
    failed = False
    total = Stats()
    for mode in args.modes.split(","):
        stats = Stats()
        started = time.monotonic()
        with tempfile.TemporaryDirectory() as directory:
            fuzz_server(mode, directory, args.examples, args.frames, derandomize=False, stats=stats, poke=poke)
        print(f"{mode:>6}: {stats.line()} ({time.monotonic() - started:.0f} s)", flush=True)
        for frame, what in stats.wrong[:10]:
            print(f"        {what!r} after {frame!r:.300}")
        failed |= bool(stats.crashes or stats.hangs or stats.wrong)
        for name in ("frames", "ok_replies", "error_replies", "restarts", "stream_ends", "crashes", "hangs"):
            setattr(total, name, getattr(total, name) + getattr(stats, name))
        total.wrong += stats.wrong
    print(f"   all: {total.line()}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
