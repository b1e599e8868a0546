"""SmolLM2-135M-Instruct (Q4_1 GGUF) side by side: Spine (examples/smollm2), llama.cpp on the same GGUF, and
eager torch on the dequantized weights, on the same threads, in one run.

    .venv/bin/python bench/llm.py [--threads N] [--prompt-tokens 128] [--new-tokens 64] [--skip-llama-cpp]
    .venv/bin/python bench/llm.py --riscv64-counts [--int8]   # guest instructions per decoded token, QEMU
    .venv/bin/python bench/llm.py --riscv64-per-token [--ime]  # both modes against llama.cpp's RVV build
                                                               # (and its IME1 build, and Spine on IME)

Host rows: prefill tokens/s (one pass over a prompt of `--prompt-tokens`) and decode tokens/s (`--new-tokens`
single-token passes after it), best of `--rounds`, for Spine's fp32 activations and its int8 mode (llama.cpp's
arithmetic: examples/smollm2/int8_kernels.py). llama.cpp's figures are `llama-bench`'s (pp and tg
tests, same lengths and threads), built by bench/llama_cpp.py. Spine's grid threads are set with
SPINE_NUM_THREADS; torch's with torch.set_num_threads.

riscv64 counts: every guest instruction inside Spine's kernels for one decode step after a 16-token prompt,
counted by `spine.count` (QEMU's execution log). The step is the embedding, 30 identical layers and the head:
one layer's kernels and the head's are counted and the layers multiplied out, which is exact because the
layers have the same shapes and positions.

riscv64 per token, against llama.cpp: llama.cpp's RVV build (bench/llama_cpp.py riscv64) as `llama-bench
-t 1 -pg P,N`, whole, under QEMU with the plugin counter of bench/qemu_plugin.py (QEMU's execution log, which
spine.count reads, logs a few hundred thousand instructions a second: too slow for llama.cpp's model load).
It runs for two values of N and the difference is divided by theirs: loading, the prompt and start-up cancel
out, and what is left is decoded tokens at positions P + N. Spine's figures are the riscv64 counts above.
With `--ime` also llama.cpp's build with SpacemiT's IME1 kernels (bench/llama_cpp.py riscv64-ime), whose
vmadots trap into an emulation under QEMU: the plugin leaves the emulation's functions and the signal
return out, so each vmadot counts as the one instruction it is on K1 (`bench/llama_cpp.py riscv64-ime
--emulation-count-check` shows it on a loop of vmadots), and Spine's int8 mode compiled for spacemit-x60,
whose products run on vmadot too (examples/smollm2/paired_kernels.py; spine.count leaves the kernel
server's emulation out of QEMU's log, and counts only the kernels' own text). The two counters count the
same thing, retired guest instructions (`bench/qemu_plugin.py` runs one program under both); Spine's
kernels cannot run on the plugin's QEMU 7.2, which aborts translating them (an assertion in its RISC-V
decoder, fixed in later versions). Beside the instructions, both sides get the X60 cycle estimate of
spine.count's cost table (spine/count/cycles.py): Spine's from its kernels' executed instructions, llama.cpp's
from the instruction words the plugin records for each translation block it counts (`words=1`), the
difference of the two runs' classes divided as the instructions are."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))

from spine.count.cycles import classes_of_words, cycles_of  # noqa: E402

PROMPT_TEXT = ("The RISC-V vector extension lets one binary run on machines of any vector length. Compilers "
               "that target it must choose how to strip-mine loops, when to widen, and how to keep the vector "
               "registers busy while the scalar core computes addresses. ")


def prompt_ids(tokenizer, n: int) -> list:
    ids = []
    while len(ids) < n:
        ids += tokenizer.encode(PROMPT_TEXT)
    return ids[:n]


def best_of(rounds: int, fn) -> float:
    """Fewest seconds of `rounds` calls of fn."""
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def spine_host(gguf, prompt: list, new_tokens: int, rounds: int, int8: bool = False) -> dict:
    import torch
    import triton
    from smollm2.model import SmolLM2
    from spine.driver import CPUDriver
    triton.runtime.driver.set_active(CPUDriver(target="host"))
    model = SmolLM2.load(gguf, capacity=len(prompt) + new_tokens, int8=int8)
    ids = torch.tensor(prompt, dtype=torch.int32)

    def prefill():
        model.reset()
        model.forward(ids)

    def decode():
        prefill()
        start = time.perf_counter()
        for _ in range(new_tokens):
            model.decode(prompt[-1])  # a replayed launch graph (examples/smollm2/model.py)
        return time.perf_counter() - start

    prefill()  # compiles
    decode()
    pre = best_of(rounds, prefill)
    dec = min(decode() for _ in range(rounds))
    return {"prefill": len(prompt) / pre, "decode": new_tokens / dec}


def torch_host(gguf, prompt: list, new_tokens: int, rounds: int, threads: int) -> dict:
    import torch
    from smollm2.reference import Reference
    torch.set_num_threads(threads)
    ref = Reference.load(gguf)

    def decode():
        cache = []
        with torch.no_grad():
            ref.logits(prompt, cache)
            start = time.perf_counter()
            for _ in range(new_tokens):
                ref.logits(prompt[-1:], cache)
        return time.perf_counter() - start

    with torch.no_grad():
        pre = best_of(rounds, lambda: ref.logits(prompt, []))
    dec = min(decode() for _ in range(rounds))
    return {"prefill": len(prompt) / pre, "decode": new_tokens / dec}


def llama_cpp_host(path: str, prompt_tokens: int, new_tokens: int, rounds: int, threads: int) -> dict:
    from llama_cpp import build
    bin_dir = build("host")
    out = subprocess.run([os.path.join(bin_dir, "llama-bench"), "-m", path, "-t", str(threads), "-p",
                          str(prompt_tokens), "-n", str(new_tokens), "-r", str(rounds), "-o", "json"],
                         capture_output=True, text=True, check=True)
    return {("prefill" if row["n_prompt"] else "decode"): row["avg_ts"] for row in json.loads(out.stdout)}


class _Recording:
    """Stands in for a @triton.jit kernel: launches it and keeps each launch (kernel, grid, arguments), so
    that each can be counted again alone."""

    def __init__(self, kernel, launches: list):
        self.kernel, self.launches = kernel, launches

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.launches.append((self.kernel, grid, args, kwargs))
            return self.kernel[grid](*args, **kwargs)
        return launch


def riscv64_counts(gguf, int8: bool = False, cpu: str | None = None) -> dict:
    """Guest instructions inside Spine's kernels for one decode step (see the module's docstring), the
    kernels compiled for `cpu` (default SPINE_RISCV_CPU's)."""
    if cpu is not None:
        saved = os.environ.get("SPINE_RISCV_CPU")
        os.environ["SPINE_RISCV_CPU"] = cpu
        try:
            return riscv64_counts(gguf, int8)
        finally:
            os.environ.pop("SPINE_RISCV_CPU") if saved is None else os.environ.update(SPINE_RISCV_CPU=saved)
    import torch
    import triton
    from icount import count_launch
    from smollm2 import int8_kernels, kernels, paired_kernels
    from smollm2.model import SmolLM2
    from spine.driver import CPUDriver
    triton.runtime.driver.set_active(CPUDriver(target="riscv64"))
    model = SmolLM2.load(gguf, capacity=32, n_layers=1, int8=int8)
    cfg = model.config
    model.forward(torch.arange(16, dtype=torch.int32))  # compiles, and fills 16 positions of the cache
    # the kernels the launchers launch (not the @triton.jit helpers the kernels call)
    jitted = {(module, name): value for module in (kernels, int8_kernels, paired_kernels)
              for name, value in vars(module).items()
              if isinstance(value, triton.JITFunction) and name.endswith("_kernel")}
    parts = {"embedding": lambda: model.products.embedding(torch.tensor([7], dtype=torch.int32), model.embed),
             "layer": lambda: model.run_layer(0, torch.randn(1, cfg.width)),  # at position 16
             "head + argmax": lambda: kernels.argmax(model.products.linear(
                 torch.randn(1, cfg.width), model.embed, norm=model.output_norm, eps=cfg.rms_eps))}
    counts, classes = {}, {}
    for part, run in parts.items():
        launches = []
        try:
            for (module, name), kernel in jitted.items():
                setattr(module, name, _Recording(kernel, launches))
            run()
        finally:
            for (module, name), kernel in jitted.items():
                setattr(module, name, kernel)
        counted = [(kernel.__name__, count_launch(lambda: kernel[grid](*args, **kwargs)))
                   for kernel, grid, args, kwargs in launches]
        counts[part] = [(name, c.total) for name, c in counted]
        classes[part] = sum((Counter(c.x60.classes) for _, c in counted), Counter())
    total = {part: sum(n for _, n in launches) for part, launches in counts.items()}
    layers = gguf.config.n_layers
    per_token = total["embedding"] + layers * total["layer"] + total["head + argmax"]
    token_classes = classes["embedding"] + classes["head + argmax"]
    for cls, n in classes["layer"].items():
        token_classes[cls] += layers * n
    return {"per_token": per_token, "parts": total, "kernels": counts, "layers": layers,
            "x60_cycles_per_token": cycles_of(token_classes)[0], "classes_per_token": dict(token_classes)}


# decoded tokens of the two runs llama.cpp's per-token figure is the difference of
PER_TOKEN_RUNS = (2, 10)


def llama_cpp_riscv64_per_token(path: str, prompt_tokens: int, target: str = "riscv64") -> tuple[float, float]:
    """Guest instructions and estimated X60 cycles per decoded token of llama.cpp's RVV build (`target`
    riscv64) or of its build with SpacemiT's IME1 kernels (riscv64-ime: every vmadot counted once, the
    emulation that carries it out under QEMU not at all), llama-bench on one thread (see the module's
    docstring). The cycles: spine.count's estimate (spine/count/cycles.py) of the per-token difference of the
    two runs' instructions by class, from the words the plugin records."""
    import tempfile
    import qemu_plugin
    from llama_cpp import IME_ENV, build, emulation_ranges
    bench = os.path.join(build(target), "llama-bench")
    skip = emulation_ranges(bench) if target == "riscv64-ime" else ()
    counts, classes = [], []
    with tempfile.TemporaryDirectory(prefix="spine-llama-cpp-count-") as workdir:
        for decode in PER_TOKEN_RUNS:
            prefix = os.path.join(workdir, f"decode-{decode}")
            argv, env = qemu_plugin.counting_command(
                [bench, "-m", path, "-t", "1", "-r", "1", "-p", "0", "-n", "0", "-pg", f"{prompt_tokens},{decode}"],
                prefix, skip=skip, words=True)
            if target == "riscv64-ime":
                env = dict(env, **IME_ENV)
            subprocess.run(argv, env=env, check=True, capture_output=True)
            counts.append(qemu_plugin.instructions(prefix))
            classes.append(classes_of_words(qemu_plugin.word_counts(prefix)))
            print(f"llama.cpp ({target}), {prompt_tokens}-token prompt and {decode} decoded: "
                  f"{counts[-1]} instructions, classes {dict(classes[-1])}", file=sys.stderr, flush=True)
    tokens = PER_TOKEN_RUNS[1] - PER_TOKEN_RUNS[0]
    token_classes = {cls: (classes[1][cls] - classes[0][cls]) / tokens for cls in classes[1]}
    return (counts[1] - counts[0]) / tokens, cycles_of(token_classes)[0]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--skip-llama-cpp", action="store_true")
    parser.add_argument("--riscv64-counts", action="store_true")
    parser.add_argument("--int8", action="store_true", help="--riscv64-counts of the int8 mode")
    parser.add_argument("--riscv64-per-token", action="store_true")
    parser.add_argument("--ime", action="store_true", help="--riscv64-per-token: also llama.cpp's IME1 build and "
                        "Spine's int8 mode on K1's matrix unit")
    args = parser.parse_args(argv)
    os.environ["SPINE_NUM_THREADS"] = str(args.threads)
    from smollm2.gguf_file import read_gguf
    from smollm2.tokenizer import build_tokenizer
    gguf = read_gguf()
    if args.riscv64_counts:
        print(json.dumps(riscv64_counts(gguf, args.int8), indent=1))
        return
    prompt = prompt_ids(build_tokenizer(gguf.fields), args.prompt_tokens)
    if args.riscv64_per_token:
        rows = {"llama.cpp (RVV)": llama_cpp_riscv64_per_token(gguf.path, args.prompt_tokens)}
        if args.ime:
            rows["llama.cpp (IME1: vmadot)"] = llama_cpp_riscv64_per_token(gguf.path, args.prompt_tokens,
                                                                          "riscv64-ime")
        spine_rows = [(True, None, "Spine, int8 activations"), (False, None, "Spine, fp32 activations")]
        if args.ime:
            spine_rows.append((True, "spacemit-x60", "Spine, int8 activations, K1's matrix unit (spacemit-x60)"))
        for int8, cpu, name in spine_rows:
            counted = riscv64_counts(gguf, int8, cpu)
            rows[name] = counted["per_token"], counted["x60_cycles_per_token"]
            print(f"{name}: {rows[name]} instructions and X60 cycles per token", file=sys.stderr, flush=True)
        print("| SmolLM2-135M Q4_1, riscv64 (VLEN 256) | guest instructions per decoded token | / llama.cpp "
              "(RVV) | estimated X60 cycles per token | / llama.cpp (RVV) |"
              + (" instructions / llama.cpp (IME1) | cycles / llama.cpp (IME1) |" if args.ime else ""))
        print("|---|---|---|---|---|" + ("---|---|" if args.ime else ""))
        ref, ime = rows["llama.cpp (RVV)"], rows.get("llama.cpp (IME1: vmadot)")
        for name, (count, cycles) in rows.items():
            print(f"| {name} | {count / 1e6:.1f} M | {count / ref[0]:.2f} | {cycles / 1e6:.1f} M | {cycles / ref[1]:.2f} |"
                  + (f" {count / ime[0]:.2f} | {cycles / ime[1]:.2f} |" if ime else ""))
        return
    rows = {"Spine": spine_host(gguf, prompt, args.new_tokens, args.rounds),
            "Spine, int8 activations": spine_host(gguf, prompt, args.new_tokens, args.rounds, int8=True),
            "eager torch (fp32, dequantized)": torch_host(gguf, prompt, args.new_tokens, args.rounds, args.threads)}
    if not args.skip_llama_cpp:
        rows["llama.cpp"] = llama_cpp_host(gguf.path, args.prompt_tokens, args.new_tokens, args.rounds, args.threads)
    print(f"| SmolLM2-135M Q4_1, {args.threads} threads | prefill tokens/s ({args.prompt_tokens}-token prompt) | "
          f"decode tokens/s ({args.new_tokens} tokens) |")
    print("|---|---|---|")
    for name, speed in rows.items():
        print(f"| {name} | {speed['prefill']:.1f} | {speed['decode']:.1f} |")
    if "llama.cpp" in rows:
        ref = rows["llama.cpp"]
        for name in ("Spine", "Spine, int8 activations"):
            print(f"| {name} / llama.cpp | {rows[name]['prefill'] / ref['prefill']:.2f} | "
                  f"{rows[name]['decode'] / ref['decode']:.2f} |")


if __name__ == "__main__":
    main()
