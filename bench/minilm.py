"""all-MiniLM-L6-v2 through torch.compile with Spine (spine.inductor), against eager PyTorch and Inductor's
default C++ CPU backend, and its riscv64 cost in guest instructions per token.

    .venv/bin/python bench/minilm.py                 # everything below
    .venv/bin/python bench/minilm.py --skip-riscv64  # host only

host: one process, one thread count for all three (torch.set_num_threads and SPINE_NUM_THREADS), rounds
interleaved; each figure is the median of the rounds' per-call times. Cold compile is the first call of
a fresh process with empty triton and Inductor caches (Spine's runtime builds kept); a new batch shape is
the first call with another (batch, length) after that, with dynamic=True.
riscv64: a call of the compiled model (two sentences; one and two encoder layers by default) in a traced
QEMU kernel server, grid on one thread; every guest instruction inside Spine's kernels is counted (as
spine.count does), divided by the batch's real tokens; the six-layer figure adds four more times the
difference between the two depths (the layers are the same kernels on the same shapes)."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# examples/minilm is the model's package: this script's own directory must not shadow it
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != HERE]
sys.path[:0] = [os.path.join(HERE, "..", "examples"), os.path.join(HERE, "..")]
os.environ.setdefault("HF_HUB_OFFLINE", "1")

SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A man is riding a horse.",
    "A woman is playing violin.",
    "Two men pushed carts through the woods.",
    "A man is riding a white horse on an enclosed ground.",
    "A monkey is playing drums.",
    "Someone in a gorilla costume is playing a set of drums.",
    "The new movie is awesome, everyone in the theatre loved it and talked about it for days afterwards.",
    "Compilers for RISC-V vector machines.",
    "It rained.",
]


def batch(n_sentences):
    from minilm.bert import load_tokenizer, tokenize
    sentences = (SENTENCES * (n_sentences // len(SENTENCES) + 1))[:n_sentences]
    return tokenize(load_tokenizer(), sentences)


def cold_compile(target, n_sentences):
    """Runs in a fresh process with empty caches: seconds to the first result, then to a new shape."""
    import torch
    import spine.inductor
    from minilm.bert import load_encoder
    spine.inductor.enable(target)
    encoder = load_encoder()
    ids, mask = batch(n_sentences)
    ids2, mask2 = batch(n_sentences // 2 + 1)
    with torch.no_grad():
        compiled = torch.compile(encoder, dynamic=True)
        start = time.perf_counter()
        compiled(ids, mask)
        first = time.perf_counter() - start
        start = time.perf_counter()
        compiled(ids2, mask2)
        new_shape = time.perf_counter() - start
    return {"first_call_s": first, "new_shape_s": new_shape}


def measure_cold(target, n_sentences, caches):
    from spine.cache import cache_dir
    # Spine's own cache (runtime builds, compiler-rt) lives under triton's by default: keep it where it is
    env = dict(os.environ, TRITON_CACHE_DIR=os.path.join(caches, "triton"),
               TORCHINDUCTOR_CACHE_DIR=os.path.join(caches, "inductor"), SPINE_CACHE_DIR=cache_dir())
    out = subprocess.run([sys.executable, __file__, "--cold-child", target, str(n_sentences)], env=env,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def host_speed(n_sentences, rounds, threads):
    import torch
    if threads:
        torch.set_num_threads(threads)
        os.environ["SPINE_NUM_THREADS"] = str(threads)
    import spine.inductor
    from minilm.bert import load_encoder
    spine.inductor.enable("host")
    encoder = load_encoder()
    ids, mask = batch(n_sentences)
    with torch.no_grad():
        spine_model = torch.compile(encoder, dynamic=True)
        cpp_model = torch.compile(encoder, dynamic=True, options={"cpu_backend": "cpp"})
        runs = {"eager": encoder, "spine": spine_model, "inductor_cpp": cpp_model}
        expected = encoder(ids, mask)
        for name, model in runs.items():
            got = model(ids, mask)
            cos = torch.nn.functional.cosine_similarity(got, expected).min().item()
            assert cos >= 0.9999, (name, cos)
        times = {name: [] for name in runs}
        calls = 3
        for _ in range(rounds):
            for name, model in runs.items():
                start = time.perf_counter()
                for _ in range(calls):
                    model(ids, mask)
                times[name].append((time.perf_counter() - start) / calls)
    median = {name: statistics.median(t) for name, t in times.items()}
    return {"shape": list(ids.shape), "tokens": int(mask.sum()), "threads": torch.get_num_threads(),
            "ms": {name: 1e3 * m for name, m in median.items()},
            "eager_over_spine": median["eager"] / median["spine"],
            "cpp_over_spine": median["inductor_cpp"] / median["spine"]}


def riscv64_instructions(n_sentences, layers):
    import torch
    import triton  # noqa: F401  (before spine.driver: triton's backend discovery imports it)
    import spine.inductor
    from minilm.bert import load_encoder
    from spine import switches
    from spine.count.trace import _switches_set, _TraceReader
    from spine.driver.cpu_driver import _executor_for
    from spine.driver.qemu import QemuKernel
    from spine.targets import riscv64_target
    spine.inductor.enable("riscv64")
    encoder = load_encoder(num_layers=layers)
    ids, mask = batch(n_sentences)
    with torch.no_grad():
        compiled = torch.compile(encoder, dynamic=True)
        compiled(ids, mask)                      # compile and load outside the trace
        executor = _executor_for(riscv64_target())
        with tempfile.TemporaryDirectory(prefix="spine-minilm-") as tmp:
            fifo = os.path.join(tmp, "trace")
            os.mkfifo(fifo)
            reader = _TraceReader(fifo)
            reader.start()
            values = {switches.QEMU_TRACE: fifo, switches.NUM_THREADS: 1}
            if hasattr(switches, "REMOTE"):
                values[switches.REMOTE] = None   # counting needs QEMU's log, not a board
            texts = set()   # the code range of every kernel the traced server loads
            real_handle = QemuKernel._handle

            def recording_handle(kernel, server):
                handle = real_handle(kernel, server)
                texts.add(tuple(kernel.loaded.text))
                return handle
            QemuKernel._handle = recording_handle
            try:
                with _switches_set(values):
                    executor.shutdown()
                    start = time.perf_counter()
                    compiled(ids, mask)
                    seconds = time.perf_counter() - start
                    executor.shutdown()
            finally:
                QemuKernel._handle = real_handle
            reader.join(timeout=3600)
    in_kernels = sum(n for pc, n in reader.counts.items()
                     if any(lo <= pc < hi for lo, hi in texts))
    tokens = int(mask.sum())
    return {"shape": list(ids.shape), "tokens": tokens, "layers": layers, "kernels_loaded": len(texts),
            "instructions_in_kernels": in_kernels, "per_token": in_kernels / tokens,
            "all_guest_instructions": sum(reader.counts.values()), "traced_seconds": seconds}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sentences", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--threads", type=int, default=0, help="for all three (default: torch's default)")
    parser.add_argument("--skip-riscv64", action="store_true")
    parser.add_argument("--riscv64-layers", type=int, nargs="+", default=[1, 2],
                        help="encoder depths to count (tracing is slow: about 7 minutes a layer here); with "
                             "two, the six-layer count is extrapolated from their difference")
    parser.add_argument("--cold-child", nargs=2)
    parser.add_argument("--only", choices=["cold", "speed", "riscv64"])
    args = parser.parse_args()
    if args.cold_child:
        print(json.dumps(cold_compile(args.cold_child[0], int(args.cold_child[1]))))
        return
    results = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpus": os.cpu_count(),
               "load_average": os.getloadavg()}
    if args.only in (None, "cold"):
        with tempfile.TemporaryDirectory(prefix="spine-minilm-caches-") as caches:
            results["host_cold"] = measure_cold("host", args.sentences, caches)
            results["host_warm_cache"] = measure_cold("host", args.sentences, caches)
    if args.only in (None, "speed"):
        results["host_speed"] = host_speed(args.sentences, args.rounds, args.threads)
    if args.only in (None, "riscv64") and not args.skip_riscv64:
        counts = [riscv64_instructions(2, layers) for layers in args.riscv64_layers]
        results["riscv64"] = counts
        if len(counts) == 2:
            (a, b) = counts
            per_layer = (b["instructions_in_kernels"] - a["instructions_in_kernels"]) / (b["layers"] - a["layers"])
            six = a["instructions_in_kernels"] + (6 - a["layers"]) * per_layer
            results["riscv64_six_layers_estimate"] = {"per_layer": per_layer, "instructions": six,
                                                      "per_token": six / a["tokens"]}
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
