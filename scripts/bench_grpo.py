"""Throughput of the GRPO update, in its two phases, next to a plain forward + backward of the same tokens.

    python scripts/bench_grpo.py --json bench_grpo.json        # CPU: tiny and small local models
    python scripts/bench_grpo.py --sizes qwen3-0.6b qwen3-1.7b --device cuda   # GPU, bf16, from config
    python scripts/bench_grpo.py --sizes models/smollm2         # a real checkpoint directory

Samples have the length distribution of real rollouts: the demo's per-turn samples
(ALFWorld small games, compact prompts, adaptive harness, the scripted teacher with its
slips), each turn's chat prompt and response tokenised with the tiny model's tokenizer,
so prompts and completions vary in length and padding counts against the trainer.
A step's samples are micro-batches as the trainer cuts them: it sorts a mini-batch's
samples by length and takes `--micro-batch` consecutive ones, so a micro-batch's rows are
as alike as the mini-batch is large (`--mini-batch-samples`, 256 by default: the demo's 16
trajectories of 16-20 turns; `--mini-batch-samples 16` is a step whose mini-batch is its
16 samples, the most padding). `positions_per_token` is what the update computes per real
token (1.0: no padding). Token ids are random (speed does not depend on them). Per size, in
interleaved rounds (the machine may be shared; each kind's median round is kept):

- `update`: the trainer's policy step (`grpo.trainer.optimizer_step`: micro-batches as the
  trainer builds them -- packed where the model supports it -- logits for the completion
  tokens only, PPO-clip + k3 KL + entropy loss, backward, AdamW) with the reference
  logprobs already computed, i.e. without the reference pass;
- `ref`: the reference pass alone (`grpo.trainer.score_samples`, no grad);
- `plain`: a plain causal-LM step over the same token ids: the samples' tokens end to
  end in rows as wide as the longest sample, one forward over every position,
  cross-entropy, backward, AdamW step -- no padding at all.

Every figure counts the samples' real tokens (prompt + completion) per second;
`update_vs_plain` and `ref_vs_plain` are the ratios (targets >= 1.0 and >= 2.5).
`peak_rss_mb` is the process's peak resident memory after the size's measurements (it
includes everything before; on a GPU `peak_gpu_mb` is the size's own peak). Scaling rows
repeat the measurement with the same distribution stretched so that the longest sample is
512, 1024 and 2048 tokens (`--scale-lengths`, on `--scale-sizes`).
On a GPU, MFU = 6 * parameters * tokens/s / peak bf16 FLOP/s.
"""

from __future__ import annotations

import argparse
import random
import resource
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import torch

PEAK_BF16_FLOPS = {"H200": 989e12, "H100": 989e12, "A100": 312e12}  # dense bf16 tensor-core peaks


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", default=["tiny", "small"],
                        help="tiny | small | base (local init_model) | qwen3-0.6b | qwen3-1.7b (shapes from config) | a "
                             "checkpoint directory (real weights, e.g. models/smollm2)")
    parser.add_argument("--device", default="auto", help="auto | cpu | cuda")
    parser.add_argument("--samples", type=int, default=16, help="per-turn samples per optimizer step")
    parser.add_argument("--micro-batch", type=int, default=8, help="grpo.micro_batch_samples of the update (its default)")
    parser.add_argument("--mini-batch-samples", type=int, default=256,
                        help="samples of the mini-batch the step's micro-batches are cut from, sorted by length as "
                             "the trainer does (the demo's 16 trajectories of 16-20 turns; <= --samples: one unsorted "
                             "step)")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds (after one warm-up); medians are kept")
    parser.add_argument("--scale-lengths", nargs="*", type=int, default=[512, 1024, 2048],
                        help="longest sample of each scaling row (none: no scaling rows)")
    parser.add_argument("--scale-sizes", nargs="*", default=["tiny"], help="sizes that get scaling rows")
    parser.add_argument("--scale-rounds", type=int, default=2, help="timed rounds of a scaling row")
    parser.add_argument("--data-dir", default="data/bench", help="where the ALFWorld games for the lengths go")
    parser.add_argument("--gradient-checkpointing", action="store_true", help="recompute activations (GPU runs)")
    parser.add_argument("--json", help="write the results to this JSON file")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def build_model(size: str, device: str, dtype: torch.dtype):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from evoharness_rl.models import QWEN3_SHAPES, init_model, load_model

    if size in QWEN3_SHAPES:
        config = Qwen3Config(max_position_embeddings=40960, dtype=dtype, **QWEN3_SHAPES[size])
        with torch.device(device):
            return Qwen3ForCausalLM(config).to(dtype)
    path = size if Path(size).is_dir() else init_model(size, tempfile.mkdtemp(prefix=f"bench-{size}-"))
    return load_model(SimpleNamespace(path=str(path), dtype="float32", attn_implementation="sdpa",
                                      trust_remote_code=False), device=device)


# ------------------------------------------------------------------------ sample lengths


def rollout_lengths(args) -> list[tuple[int, int]]:
    """(prompt, completion) tokens of every per-turn sample of scripted demo-style ALFWorld episodes."""
    from evoharness_rl.config import Config
    from evoharness_rl.engines.scripted import ScriptedBackend
    from evoharness_rl.engines.tokens import encode_prompt
    from evoharness_rl.envs import env_factory, make_env
    from evoharness_rl.envs.alfworld.prepare import prepare
    from evoharness_rl.models import init_model, load_tokenizer
    from evoharness_rl.rollout.engine import EpisodeJob, RolloutEngine, episode_settings
    from evoharness_rl.rollout.pool import EnvPool
    from evoharness_rl.runlog import set_progress

    set_progress(False)
    cfg = Config(out_dir=tempfile.mkdtemp(prefix="bench_grpo_"), seed=args.seed)
    cfg.env = replace(cfg.env, name="alfworld", data_dir=str(Path(args.data_dir) / "alfworld"), prompt_style="compact",
                      max_steps_eval=30, num_workers=1)
    cfg.env.alfworld = replace(cfg.env.alfworld, size="small", train_games=1, valid_seen_games=16,
                               valid_unseen_games=1, generator_seed=args.seed)
    cfg.harness = replace(cfg.harness, mode="adaptive", history_length=3)
    prepare(cfg.env)
    env = make_env(cfg.env)
    tasks = env.task_ids("valid_seen")[:16]
    env.close()
    tokenizer = load_tokenizer(str(init_model("tiny", tempfile.mkdtemp(prefix="bench-tok-"))))
    pool = EnvPool(env_factory(cfg.env), 1, cfg.env.step_timeout_s)
    with RolloutEngine(pool, ScriptedBackend(), max_live_episodes=16, harness_rate=0.5, slip_rate=0.2) as engine:
        trajs = engine.run([EpisodeJob(t, seed=args.seed) for t in tasks], episode_settings(cfg))
    eos = tokenizer.eos_token or ""
    return [(len(encode_prompt(tokenizer, turn.messages)),
             len(tokenizer(turn.response + eos, add_special_tokens=False)["input_ids"]))
            for traj in trajs for turn in traj.turns]


def step_lengths(lengths: list[tuple[int, int]], n: int, seed: int, mini_batch: int, micro: int
                 ) -> list[tuple[int, int]]:
    """The (prompt, completion) lengths of one optimizer step's `n` samples, drawn from `lengths`.

    The trainer sorts a mini-batch's samples by length and cuts micro-batches of `micro`
    consecutive ones (`grpo.batch.micro_batches`), so a micro-batch's rows are as alike as the
    mini-batch is large. With `mini_batch` > `n` the step is `n // micro` such micro-batches
    of a sorted mini-batch of `mini_batch` samples, taken at evenly spread quantiles (so the
    step still spans the length distribution); otherwise `n` samples drawn at random, which
    is what a mini-batch of only `n` samples would be.
    """
    rng = random.Random(seed)
    if mini_batch <= n:
        return [rng.choice(lengths) for _ in range(n)]
    drawn = sorted((rng.choice(lengths) for _ in range(mini_batch)), key=sum)
    runs = max(1, n // micro)
    starts = [min(mini_batch - micro, max(0, round((k + 0.5) * mini_batch / runs - micro / 2))) for k in range(runs)]
    picked = [drawn[start + j] for start in starts for j in range(micro)]
    return (picked + [rng.choice(lengths) for _ in range(n)])[:n]


def make_samples(lengths: list[tuple[int, int]], n: int, vocab: int, seed: int, longest: int = 0,
                 mini_batch: int = 0, micro: int = 8):
    """`n` samples with the lengths of one optimizer step (`step_lengths`), stretched so that the longest possible
    is `longest` when set; random token ids."""
    from evoharness_rl.grpo.batch import Sample

    g = torch.Generator().manual_seed(seed)
    scale = longest / max(p + c for p, c in lengths) if longest else 1.0
    rows = []
    for i, (prompt, completion) in enumerate(step_lengths(lengths, n, seed, mini_batch, micro)):
        prompt, completion = max(1, round(prompt * scale)), max(1, round(completion * scale))
        ids = torch.randint(10, vocab, (prompt + completion,), generator=g).tolist()
        old = (-torch.rand(completion, generator=g) * 3).tolist()
        ref = (-torch.rand(completion, generator=g) * 3).tolist()
        rows.append(Sample(ids, [0] * prompt + [1] * completion, [0.0] * prompt + old,
                           advantage=1.0 if i % 2 else -1.0, trajectory=i, ref_logprobs=[0.0] * prompt + ref))
    return rows


# ------------------------------------------------------------------------------ phases


def grpo_run(model, reference_model, device: str, micro_batch: int):
    """A `trainer.Run` holding just what `optimizer_step` and `score_samples` use."""
    from accelerate import Accelerator

    from evoharness_rl.config import Config
    from evoharness_rl.grpo.batch import make_plan
    from evoharness_rl.grpo.build import Run, SilentLog
    from evoharness_rl.grpo.checkpoint import TrainerState
    from evoharness_rl.grpo.policy import Reference

    cfg = Config()
    cfg.grpo.micro_batch_samples = micro_batch
    acc = Accelerator(cpu=device == "cpu")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6, weight_decay=0.01, fused=device == "cuda")
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    model, optimizer, scheduler = acc.prepare(model, optimizer, scheduler)
    return Run(cfg=cfg, accelerator=acc, plan=make_plan(cfg.grpo, 1), log=SilentLog(), model=model,
               tokenizer=SimpleNamespace(pad_token_id=0), reference=Reference(model=reference_model),
               optimizer=optimizer, scheduler=scheduler, sampler=None, eval_tasks=[], state=TrainerState(), out_dir=None)


def plain_step(model, samples, device: str):
    """A causal-LM step over the samples' tokens end to end (rows as wide as the longest sample, no padding)."""
    stream = [t for s in samples for t in s.input_ids]
    width = max(len(s.input_ids) for s in samples)
    full = len(stream) // width * width
    chunks = [torch.tensor(stream[:full], device=device).view(-1, width)] if full else []
    if full < len(stream):
        chunks.append(torch.tensor(stream[full:], device=device)[None])  # the remainder: one shorter row
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6, fused=device == "cuda")
    total = len(stream)

    def step():
        for ids in chunks:  # weighted so the loss is the mean over every predicted token
            loss = model(input_ids=ids, labels=ids).loss * (ids.numel() / total)
            loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def measure(phases: dict, rounds: int, device: str) -> dict[str, float]:
    """Median seconds of each phase over `rounds` interleaved rounds, after one warm-up round."""
    times: dict[str, list[float]] = {name: [] for name in phases}
    for r in range(rounds + 1):
        for name, fn in phases.items():
            if device == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            fn()
            if device == "cuda":
                torch.cuda.synchronize()
            if r:
                times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def bench(size: str, samples_of, args, device: str, rounds: int) -> dict:
    from evoharness_rl.grpo import batch as B
    from evoharness_rl.grpo.trainer import layout, optimizer_step, score_samples

    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model = build_model(size, device, dtype)
    if args.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.config.use_cache = False
    params = sum(p.numel() for p in model.parameters())
    samples = samples_of(model.config.vocab_size)
    tokens = sum(len(s.input_ids) for s in samples)
    reference = build_model(size, device, dtype).requires_grad_(False).eval()
    reference.load_state_dict(model.state_dict())
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    plain = plain_step(model, samples, device)
    run = grpo_run(model, reference, device, args.micro_batch)
    seconds = measure({"plain": plain, "update": lambda: optimizer_step(run, samples),
                       "ref": lambda: score_samples(run, samples)}, rounds, device)
    batches = [B.build(rows, 0, layout(run)) for rows in B.micro_batches(samples, args.micro_batch, layout(run))]
    out = {"size": size, "params_m": params / 1e6, "samples": len(samples), "tokens_per_step": tokens,
           "loss_tokens_per_step": sum(s.loss_tokens for s in samples),
           "longest": max(len(s.input_ids) for s in samples), "layout": layout(run),
           "positions_per_token": sum(b.input_ids.numel() for b in batches) / tokens}  # > 1: padding the update computes
    for kind in ("update", "ref"):
        out[f"{kind}_tokens_per_s"] = tokens / seconds[kind]
    out["plain_fwd_bwd_tokens_per_s"] = tokens / seconds["plain"]
    out["update_vs_plain"] = out["update_tokens_per_s"] / out["plain_fwd_bwd_tokens_per_s"]
    out["ref_vs_plain"] = out["ref_tokens_per_s"] / out["plain_fwd_bwd_tokens_per_s"]
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if device == "cuda":
        name = torch.cuda.get_device_name()
        peak = next((v for k, v in PEAK_BF16_FLOPS.items() if k in name), None)
        for kind, key in (("update", "update_tokens_per_s"), ("plain", "plain_fwd_bwd_tokens_per_s")):
            out[f"{kind}_mfu"] = 6 * params * out[key] / peak if peak else float("nan")
        out.update(peak_gpu_mb=torch.cuda.max_memory_allocated() / 2**20, gpu=name)
        del run, model, reference
        torch.cuda.empty_cache()
    return out


def row(r: dict) -> str:
    line = (f"{str(r['size'])[-11:]:>11} {r['params_m']:6.1f}M {r['longest']:5d} {r['tokens_per_step']:7d} "
            f"{r['update_tokens_per_s']:10,.0f} {r['ref_tokens_per_s']:10,.0f} {r['plain_fwd_bwd_tokens_per_s']:10,.0f} "
            f"{r['update_vs_plain']:8.2f} {r['ref_vs_plain']:8.2f} {r['positions_per_token']:6.2f} "
            f"{r['peak_rss_mb']:8.0f}")
    if "update_mfu" in r:
        line += f"  MFU {r['update_mfu']:.1%} vs {r['plain_mfu']:.1%}  peak GPU {r['peak_gpu_mb']:,.0f} MB"
    return line


def main() -> None:
    args = parse_args()
    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    lengths = rollout_lengths(args)
    prompts, completions = [p for p, _ in lengths], [c for _, c in lengths]
    print(f"device {device} ({torch.get_num_threads()} CPU threads); {len(lengths)} per-turn samples of scripted "
          f"ALFWorld episodes: prompt {min(prompts)}-{max(prompts)} (mean {statistics.mean(prompts):.0f}) tokens, "
          f"completion {min(completions)}-{max(completions)} (mean {statistics.mean(completions):.0f}); "
          f"{args.samples} samples per step, micro-batches of {args.micro_batch} cut from a sorted mini-batch of "
          f"{args.mini_batch_samples}; median of {args.rounds} rounds")
    header = (f"{'size':>11} {'params':>7} {'long':>5} {'tokens':>7} {'update/s':>10} {'ref/s':>10} {'plain/s':>10} "
              f"{'upd/plain':>8} {'ref/plain':>8} {'pos/tok':>6} {'rss MB':>8}")
    print(header, flush=True)
    results: dict = {"device": device, "threads": torch.get_num_threads(), "command": " ".join(sys.argv),
                     "mini_batch_samples": args.mini_batch_samples,
                     "lengths": {"prompt_mean": statistics.mean(prompts), "completion_mean": statistics.mean(completions),
                                 "prompt_max": max(prompts), "completion_max": max(completions), "turns": len(lengths)},
                     "sizes": {}, "scaling": []}

    def samples_of(longest: int = 0):
        """One step's samples for a model of `vocab` tokens (`bench` builds the model first)."""
        return lambda vocab: make_samples(lengths, args.samples, vocab, args.seed, longest, args.mini_batch_samples,
                                          args.micro_batch)

    for i, size in enumerate(args.sizes):
        r = bench(size, samples_of(), args, device, args.rounds)
        results["sizes"][size] = r
        print(row(r), flush=True)
    for size in args.scale_sizes if args.scale_lengths else []:
        for longest in args.scale_lengths:
            r = bench(size, samples_of(longest), args, device, args.scale_rounds)
            r["scale_longest"] = longest
            results["scaling"].append(r)
            print(row(r) + f"   (scaling: longest {longest})", flush=True)
    if args.json:
        from evoharness_rl.fileio import atomic_write_json

        atomic_write_json(args.json, results)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
