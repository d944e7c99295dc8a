"""SFT throughput through the real trainer (TRL SFTTrainer + our data path), next to a plain step.

    python scripts/bench_sft.py --json bench_sft.json --threads 1   # tiny and small: SFT vs a plain step
    python scripts/bench_sft.py --sizes small --steps 20
    python scripts/bench_sft.py --table                # the per-step table: full and LoRA, our loss vs TRL's
    python scripts/bench_sft.py --table --gpu          # + a Qwen3-0.6B-shaped model (from config), LoRA and full
    python scripts/bench_sft.py --table --sizes models/smollm2 --steps 4 --batch 2   # a real checkpoint directory
                                                      # (`init-model source=smollm2-135m-instruct out=models/smollm2`)

Default (`--json F`): for each size, on the demo's data shape -- the scripted teacher's
episodes on small generated ALFWorld games with the demo's settings (compact prompts,
adaptive harness, history 3, teacher slips 0.2), flattened into per-turn examples and
deduplicated as `sft` builds them -- two runs over the same batches, in interleaved rounds
(the machine may be shared; each kind's median round is kept):

- `sft`: `trainer.train()` of the real trainer with the demo's SFT settings (full
  parameters, lr 2e-3, batch 8, logging every 10 steps to metrics.jsonl through
  `MetricsCallback`, evaluation at the end of the epoch on a 5% validation set, a
  checkpoint every `--save-steps`, by default at the run's last step: at least as often
  as the demo's every 100), one epoch of `--steps` optimizer steps;
- `plain`: the same steps' tokens in a bare loop: each batch's examples end to end in rows
  as wide as its longest example (no padding; bench_grpo.py's plain step), one forward
  over every position with HF's causal-LM loss, backward, AdamW step.

Both count the batches' real tokens (prompt + response) per second of wall time after the
first step (warm-up); the SFT side includes everything its run does after it (evaluation,
checkpoint, logging, dataloader). `sft_vs_plain` is the ratio (target >= 0.9).

`--table` rows (the former default) are short runs with synthetic examples (Appendix L
system prompt), tokens/s of the median step. CPU rows come in pairs: `head=supervised` is
our trainer (sft/loss.py), `head=trl` the same run with TRL's own loss, which on CPU
projects every position; `x trl` is the ratio of the two, measured in the same run. GPU
rows also report peak allocated memory. Weights are random: speed does not depend on them.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from transformers import TrainerCallback

from evoharness_rl.config import Config
from evoharness_rl.models import QWEN3_SHAPES, count_parameters, env_prompt_texts, init_model, load_tokenizer
from evoharness_rl.sft import data
from evoharness_rl.runlog import cpu_model
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


# ------------------------------------------------------------------ SFT vs a plain step


def demo_examples(data_dir: str, games: int, seed: int = 0) -> list[dict]:
    """Per-turn SFT examples shaped like `make demo`'s: scripted-teacher episodes on small generated ALFWorld games."""
    from dataclasses import replace

    from evoharness_rl.engines.scripted import ScriptedBackend
    from evoharness_rl.envs import env_factory, make_env
    from evoharness_rl.envs.alfworld.prepare import prepare
    from evoharness_rl.rollout.engine import EpisodeJob, RolloutEngine, episode_settings
    from evoharness_rl.rollout.pool import EnvPool
    from evoharness_rl.runlog import set_progress

    set_progress(False)
    cfg = Config(out_dir=tempfile.mkdtemp(prefix="bench_sft_"), seed=seed)
    cfg.env = replace(cfg.env, name="alfworld", data_dir=str(Path(data_dir) / "alfworld"), prompt_style="compact",
                      max_steps_train=30, max_steps_eval=30, num_workers=1)
    cfg.env.alfworld = replace(cfg.env.alfworld, size="small", train_games=1, valid_seen_games=games,
                               valid_unseen_games=1, generator_seed=seed)
    cfg.harness = replace(cfg.harness, mode="adaptive", history_length=3)
    prepare(cfg.env)
    env = make_env(cfg.env)
    tasks = env.task_ids("valid_seen")[:games]
    env.close()
    pool = EnvPool(env_factory(cfg.env), 1, cfg.env.step_timeout_s)
    with RolloutEngine(pool, ScriptedBackend(), max_live_episodes=16, harness_rate=0.5, slip_rate=0.2) as engine:
        trajectories = engine.run([EpisodeJob(t, seed=seed) for t in tasks], episode_settings(cfg))
    version = data.current_prompt_version("alfworld", cfg.env)
    return data.build_examples([t for t in trajectories if t.won], version)


class RunTimer(TrainerCallback):
    """Wall time and trained tokens from the end of the first step (warm-up) to the end of training."""

    def __init__(self, trainer):
        self.trainer, self.start, self.tokens0, self.seconds, self.tokens = trainer, 0.0, 0, 0.0, 0

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == 1:
            self.start, self.tokens0 = time.perf_counter(), self.trainer._total_train_tokens

    def on_train_end(self, args, state, control, **kwargs):
        self.seconds = time.perf_counter() - self.start
        self.tokens = self.trainer._total_train_tokens - self.tokens0


def sft_run(path: str, tokenizer, train, validation, args, out: Path) -> tuple[float, int, list[list[list[int]]]]:
    """One epoch of the real trainer with the demo's settings -> (seconds, tokens after step 1, each step's examples)."""
    from evoharness_rl.runlog import RunLogger
    from evoharness_rl.sft.trainer import MetricsCallback

    cfg = Config(command="sft", out_dir=str(out), device="cpu", seed=0)
    cfg.model.path = path
    cfg.sft.lora, cfg.sft.learning_rate, cfg.sft.epochs = False, 2.0e-3, 1.0
    cfg.sft.per_device_batch_size, cfg.sft.save_steps = args.batch, args.save_steps or args.steps
    cfg.logger.progress = False
    log = RunLogger(out, cfg.logger)
    try:
        trainer = build_trainer(cfg, "cpu", tokenizer, train, validation, log=None)
        trainer.add_callback(MetricsCallback(log))
        timer = RunTimer(trainer)
        trainer.add_callback(timer)
        batches: list[list[list[int]]] = []  # each collated batch's examples: train()'s steps, then evaluation's
        collate = trainer.data_collator
        trainer.data_collator = lambda rows: batches.append([list(r["input_ids"]) for r in rows]) or collate(rows)
        trainer.train()
    finally:
        log.close()
    return timer.seconds, timer.tokens, batches[:args.steps]


def plain_run(path: str, batches: list[list[list[int]]]) -> tuple[float, int]:
    """The same batches in a bare forward + backward + AdamW loop -> (seconds, tokens after the first step)."""
    from types import SimpleNamespace

    from evoharness_rl.models import load_model

    model = load_model(SimpleNamespace(path=path, dtype="float32", attn_implementation="sdpa", trust_remote_code=False),
                       device="cpu")
    model.config.use_cache = False
    optimizer = torch.optim.AdamW(model.parameters(), lr=2.0e-3)
    start = 0.0
    for step, examples in enumerate(batches):
        if step == 1:
            start = time.perf_counter()
        stream = [t for ids in examples for t in ids]
        width = max(len(ids) for ids in examples)
        rows = [torch.tensor(stream[i:i + width])[None] for i in range(0, len(stream), width)]
        for ids in rows:  # weighted so the loss is the mean over every predicted token
            (model(input_ids=ids, labels=ids).loss * (ids.numel() / len(stream))).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return time.perf_counter() - start, sum(len(ids) for examples in batches[1:] for ids in examples)


def compare(size: str, examples: list[dict], args, tmp: Path) -> dict:
    """SFT and plain tokens/s of one model size, median of `args.rounds` interleaved rounds."""
    import datasets

    path = str(init_model(size, tmp / size)) if not Path(size).is_dir() else size
    tokenizer = load_tokenizer(path)
    n = args.steps * args.batch
    rows = [examples[i % len(examples)] for i in range(n + max(1, n // 20))]
    train, _ = data.tokenize_examples(datasets.Dataset.from_list(rows[:n]), tokenizer, 2048)
    validation, _ = data.tokenize_examples(datasets.Dataset.from_list(rows[n:]), tokenizer, 2048)
    sft, plain = [], []
    for r in range(args.rounds):
        seconds, tokens, batches = sft_run(path, tokenizer, train, validation, args, tmp / f"{size}-run{r}")
        sft.append(tokens / seconds)
        seconds, tokens = plain_run(path, batches)
        plain.append(tokens / seconds)
        print(f"  {size} round {r}: sft {sft[-1]:,.0f} tok/s, plain {plain[-1]:,.0f} tok/s", flush=True)
    lengths = [len(ids) for ids in train["input_ids"]]
    out = {"sft_tok_s": statistics.median(sft), "plain_tok_s": statistics.median(plain), "steps": args.steps,
           "batch": args.batch, "seq_mean": statistics.mean(lengths), "seq_max": max(lengths),
           "sft_rounds": sft, "plain_rounds": plain}
    out["sft_vs_plain"] = out["sft_tok_s"] / out["plain_tok_s"]
    return out


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
    parser.add_argument("--steps", type=int, default=None,
                        help="optimizer steps per run, the first is warm-up (default: 40; --table: 8)")
    parser.add_argument("--batch", type=int, default=8, help="examples per step")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved SFT / plain rounds; medians are kept")
    parser.add_argument("--save-steps", type=int, default=None, help="SFT checkpoint interval (default: --steps)")
    parser.add_argument("--games", type=int, default=24, help="ALFWorld games the teacher plays for the examples")
    parser.add_argument("--data-dir", default="data/bench", help="where the ALFWorld games go")
    parser.add_argument("--json", help="write the SFT vs plain results to this JSON file")
    parser.add_argument("--table", action="store_true", help="the per-step table instead (full and LoRA, our loss vs TRL's)")
    parser.add_argument("--gpu", action="store_true", help="--table: also run a Qwen3-0.6B-shaped model on the GPU")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch CPU threads (default: torch's choice; 1 can win on an oversubscribed machine)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch threads: {torch.get_num_threads()}")
    if args.table or args.gpu:
        args.steps = args.steps or 8
        return table(args)
    args.steps = args.steps or 40
    examples = demo_examples(args.data_dir, args.games)
    print(f"{len(examples)} demo-shaped examples; {args.steps} steps of {args.batch}, {args.rounds} rounds", flush=True)
    results: dict = {"command": " ".join(sys.argv), "threads": torch.get_num_threads(), "cpu": cpu_model()}
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes:
            results[Path(size).name] = r = compare(size, examples, args, Path(tmp))
            print(f"{Path(size).name}: sft {r['sft_tok_s']:,.0f} tok/s, plain {r['plain_tok_s']:,.0f} tok/s, "
                  f"sft_vs_plain {r['sft_vs_plain']:.2f} (mean {r['seq_mean']:.0f} tokens an example)", flush=True)
    if args.json:
        from evoharness_rl.fileio import atomic_write_json

        atomic_write_json(args.json, results)
        print(f"wrote {args.json}")


def table(args) -> None:
    """The per-step table: full and LoRA, our loss next to TRL's (and a Qwen3-0.6B shape on the GPU)."""
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
