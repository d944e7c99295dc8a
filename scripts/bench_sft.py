"""SFT throughput through the real trainer (TRL SFTTrainer + our data path).

    python scripts/bench_sft.py                       # CPU: tiny and small, full-parameter and LoRA
    python scripts/bench_sft.py --sizes small --steps 20
    python scripts/bench_sft.py --gpu                 # + a Qwen3-0.6B-shaped model (from config), LoRA and full
    python scripts/bench_sft.py --threads 1           # pin torch CPU threads
    python scripts/bench_sft.py --sizes models/smollm2 --steps 4 --batch 2   # a real checkpoint directory
                                                      # (`init-model source=smollm2-135m-instruct out=models/smollm2`)

Examples are per-turn conversations shaped like ALFWorld's (Appendix L system prompt,
an observation, a `<think>..</think><action>..</action>` response), tokenized with the
local tokenizer. Tokens/s counts every non-padding token of a batch (prompt + response),
measured over the steps after the first (warm-up). GPU rows also report peak allocated
memory. Weights are random: speed and memory do not depend on their values.

CPU rows come in pairs: `head=supervised` is our trainer (the LM head runs on labelled
positions only, sft/loss.py), `head=trl` the same run with TRL's own loss, which on CPU
projects every position; `x trl` is the ratio of the two, measured in the same run.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

import torch
from transformers import TrainerCallback

from evoharness_rl.config import Config
from evoharness_rl.models import QWEN3_SHAPES, count_parameters, env_prompt_texts, init_model, load_tokenizer
from evoharness_rl.sft import data
from evoharness_rl.sft.trainer import build_trainer

QWEN3_0_6B = dict(QWEN3_SHAPES["qwen3-0.6b"], max_position_embeddings=40960)  # the published Qwen3-0.6B config


def synthetic_examples(n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    system, template = env_prompt_texts()["alfworld"]
    out = []
    for i in range(n):
        places = [f"{rng.choice(['shelf', 'drawer', 'cabinet', 'desk'])} {rng.randint(1, 9)}" for _ in range(12)]
        user = template.format(objective=f"put a mug in {places[0]}",
                               observation=f"You arrive at {places[1]}. On it, you see a mug {i % 5 + 1}.",
                               actions=", ".join(f"go to {p}" for p in places), history="1. look -> ok",
                               harness_views="PLAN:\n[ ] find mug")
        response = f"<think>The mug should be near {places[2]}.</think><action>go to {places[2]}</action>"
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user},
                    {"role": "assistant", "content": response}]
        out.append({"messages": messages, "train_turns": [1]})
    return out


def bench(model_path: str, lora: bool, steps: int, batch: int, device: str, trl_loss: bool = False) -> dict:
    """One short training run; -> tokens/s (median step), seconds per step, mean length, peak GiB (GPU).

    trl_loss: use TRL's SFTTrainer.compute_loss instead of ours (the comparison row).
    """
    import types

    import datasets
    from trl import SFTTrainer

    tokenizer = load_tokenizer(model_path)
    rows = datasets.Dataset.from_list(synthetic_examples(batch * steps))
    train, _ = data.tokenize_examples(rows, tokenizer, max_length=4096)
    with tempfile.TemporaryDirectory() as out:
        cfg = Config(command="sft", out_dir=out, device=device)
        cfg.model.path = model_path
        cfg.sft.lora, cfg.sft.per_device_batch_size, cfg.sft.epochs = lora, batch, 1.0
        cfg.sft.save_steps, cfg.sft.logging_steps = 10**6, 10**6
        trainer = build_trainer(cfg, device, tokenizer, train, None, log=None)
        if trl_loss:
            trainer.compute_loss = types.MethodType(SFTTrainer.compute_loss, trainer)
        timer = StepTimer()
        trainer.add_callback(timer)
        if device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        trainer.train()
    seq_len = statistics.mean(len(ids) for ids in train["input_ids"])
    per_step = statistics.median(timer.times[1:])  # the first step is warm-up
    result = {"tok_per_s": seq_len * batch / per_step, "s_per_step": per_step, "seq_len": seq_len}
    if device == "cuda":
        result["peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
    return result


class StepTimer(TrainerCallback):
    """Wall time of each optimizer step."""

    def __init__(self):
        self.times: list[float] = []
        self._start = 0.0

    def on_step_begin(self, args, state, control, **kwargs):
        _sync()
        self._start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        _sync()
        self.times.append(time.perf_counter() - self._start)


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def qwen3_0_6b_checkpoint(folder: Path) -> str:
    """A Qwen3-0.6B-shaped checkpoint (random bf16 weights) with the local tokenizer."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    tokenizer = load_tokenizer(str(init_model("tiny", folder / "tok")))
    model = Qwen3ForCausalLM(Qwen3Config(**QWEN3_0_6B, eos_token_id=tokenizer.eos_token_id,
                                         pad_token_id=tokenizer.pad_token_id)).to(torch.bfloat16)
    model.save_pretrained(folder / "qwen3-0.6b")
    tokenizer.save_pretrained(folder / "qwen3-0.6b")
    return str(folder / "qwen3-0.6b")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", default=["tiny", "small"], help="local model sizes (tiny, small, ...) or checkpoint directories to run on CPU")
    parser.add_argument("--steps", type=int, default=8, help="optimizer steps per run (the first is warm-up)")
    parser.add_argument("--batch", type=int, default=8, help="examples per step")
    parser.add_argument("--gpu", action="store_true", help="also run a Qwen3-0.6B-shaped model on the GPU")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch CPU threads (default: torch's choice; 1 can win on an oversubscribed machine)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch threads: {torch.get_num_threads()}")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        runs = [(Path(size).name, size, "cpu") if Path(size).is_dir() else (size, str(init_model(size, tmp / size)), "cpu")
                for size in args.sizes]
        if args.gpu:
            runs.append(("qwen3-0.6b", qwen3_0_6b_checkpoint(tmp), "cuda"))
        header = ("model", "params", "mode", "head", "device", "seq", "s/step", "tok/s", "x trl", "peak GiB")
        print("{:<11} {:>8} {:<5} {:<10} {:<6} {:>5} {:>7} {:>9} {:>6} {:>8}".format(*header))
        for name, path, device in runs:
            from transformers import AutoConfig, AutoModelForCausalLM

            with torch.device("meta"):
                params = count_parameters(AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path)))
            for lora in (False, True):
                heads = ("trl", "supervised") if device == "cpu" else ("trl",)  # on GPU ours is TRL's path
                rows = {head: bench(path, lora, args.steps, args.batch, device, trl_loss=head == "trl")
                        for head in heads}
                for head, r in rows.items():
                    peak = f"{r['peak_gib']:.1f}" if "peak_gib" in r else "-"
                    ratio = r["tok_per_s"] / rows["trl"]["tok_per_s"]
                    print(f"{name[:11]:<11} {params / 1e6:>7.1f}M {'lora' if lora else 'full':<5} {head:<10} {device:<6} "
                          f"{r['seq_len']:>5.0f} {r['s_per_step']:>7.2f} {r['tok_per_s']:>9.0f} {ratio:>6.2f} "
                          f"{peak:>8}", flush=True)


if __name__ == "__main__":
    main()
