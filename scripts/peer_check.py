"""Peer check: this project's GRPO trainer against TRL's `GRPOTrainer` on the 3-target `choice` task.

    python scripts/peer_check.py --json peer.json                       # seeds 0 1 2, 60 updates each
    python scripts/peer_check.py --updates 3 --seeds 0 --json quick.json

Both trainers start from the same warm start (a tiny `init-model` checkpoint taught the
answer format with a random colour: envs/choice/warm.py), see the same prompt token ids
(checked before training) and train with the same batch (30 prompts x 4 completions, one
AdamW step per update), learning rate, KL coefficient, clip range, temperature, entropy
coefficient, weight decay, Adam epsilon, gradient clipping and group-scaled advantages
with the token-mean loss (TRL's `dapo`). An episode is one response (env.max_steps_train=1),
so both score a completion alike: 1 when it presses the asked-for button, else 0 (TRL's
reward function plays it in the same environment). The implementations run in turn for
each seed (the order alternates), on one torch thread each, so machine noise hits both alike.

What still differs: ours takes PPO's old logprobs from the sampler, TRL from the trainer's own
forward pass; ours decays every parameter, TRL's Trainer spares biases and norm weights; the random
streams (sampling, task order) are not the same. Aligning the first two changed one answer in 7,200
of a 60-update run (docs/results.md, 2026-12-07). (Groups whose rewards all tie keep their KL term in
both, as TRL does.) On this task each trainer leaves chance on some seeds within 60 updates and
collapses to one colour on others, and which seeds do varies from run to run: compare means over
seeds, and expect them to move between runs (TRL's: 0.58 in one, 0.43 in another).

Writes {"settings": {...}, "runs": [{"impl": "ours"|"trl", "seed": int, "success": [success rate
of each update's 120 completions], "seconds_per_update": float}, ...]} after every run, and
prints the comparison: success over the last 5 updates (mean of the seeds) and seconds per update.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

TARGETS = ["red", "green", "blue"]
PROMPTS, GROUP = 30, 4  # prompts per update, completions per prompt
SETTINGS = dict(learning_rate=1e-3, kl_coef=0.01, clip_eps=0.2, temperature=1.0, entropy_coef=0.0,
                weight_decay=0.01, adam_eps=1e-8, max_grad_norm=1.0, max_new_tokens=16, warm_steps=120)
LAST = 5  # updates whose success is compared
TRL_MICRO = 24  # TRL's completions per forward/backward (gradient accumulation makes up the 120 of one step)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, not argparse's usage block
        sys.exit(f"peer_check.py: {message} (see --help)")


def parse_args(argv=None) -> argparse.Namespace:
    parser = _Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", required=True, help="where to write the results")
    parser.add_argument("--updates", type=int, default=60, help="updates per run (default 60)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="seeds (default 0 1 2)")
    args = parser.parse_args(argv)
    if args.updates < 1:
        parser.error(f"--updates {args.updates} must be at least 1")
    return args


# ------------------------------------------------------------------------------ the task


def choice_env():
    from evoharness_rl.envs.choice import ChoiceEnv

    return ChoiceEnv(PROMPTS, tuple(TARGETS))


def first_prompts(env) -> list[tuple[str, list[dict[str, str]]]]:
    """(task id, the chat messages of its one turn), as our rollout builds them (harness mode env_only)."""
    from evoharness_rl.rollout.episode import Episode, EpisodeSettings

    prompts = []
    for task_id in env.task_ids("train"):
        episode = Episode(env, EpisodeSettings(mode="env_only", max_steps=1))
        episode.reset(task_id)
        prompts.append((task_id, episode.prompt()))
    return prompts


def won(env, task_id: str, response: str) -> bool:
    """Play `response` as the one turn of `task_id` (our response parser and environment)."""
    from evoharness_rl.rollout.episode import Episode, EpisodeSettings

    episode = Episode(env, EpisodeSettings(mode="env_only", max_steps=1))
    episode.reset(task_id)
    episode.step(response)
    return bool(episode.record.won)


# ------------------------------------------------------------------------------ ours


def run_ours(warm: Path, seed: int, updates: int, out: Path, max_staleness: int = 0) -> dict:
    from evoharness_rl.config import Config, validate
    from evoharness_rl.grpo.trainer import run_grpo

    s = SETTINGS
    cfg = Config()
    cfg.command, cfg.device, cfg.seed, cfg.out_dir = "grpo", "cpu", seed, str(out)
    cfg.model.path = str(warm)
    cfg.env.name, cfg.env.choice.tasks, cfg.env.choice.targets = "choice", PROMPTS, list(TARGETS)
    cfg.env.max_steps_train = cfg.env.max_steps_eval = 1
    cfg.env.num_workers, cfg.env.max_live_episodes = 1, PROMPTS * GROUP
    cfg.harness.mode = "env_only"
    cfg.policy.backend, cfg.policy.max_new_tokens, cfg.policy.batch_size = "hf", s["max_new_tokens"], PROMPTS * GROUP
    cfg.experience.consolidator = "none"
    cfg.logger.progress = False
    r = cfg.reward  # reward = success: nothing else
    r.success_scale, r.invalid_penalty, r.repeat_penalty, r.lambda_div_max, r.lambda_eff = 1.0, 0.0, 0.0, 0.0, 0.0
    g = cfg.grpo
    g.updates, g.prompts_per_update, g.group_size = updates, PROMPTS, GROUP
    g.mini_batch_trajectories, g.micro_batch_samples = PROMPTS * GROUP, PROMPTS * GROUP
    g.learning_rate, g.kl_coef, g.clip_eps, g.temperature = s["learning_rate"], s["kl_coef"], s["clip_eps"], s["temperature"]
    g.entropy_coef, g.weight_decay, g.adam_eps, g.max_grad_norm = (s["entropy_coef"], s["weight_decay"], s["adam_eps"],
                                                                  s["max_grad_norm"])
    g.scale_rewards, g.loss_agg = "group", "token_mean"
    g.eval_every, g.save_every, g.keep_trajectories = 0, updates, 0
    g.max_staleness = max_staleness  # scripts/bench_async.py: the same run with a fixed lag
    run_grpo(validate(cfg))
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    rows = [row for row in rows if "success_rate" in row and "update" in row]
    return {"impl": "ours", "seed": seed, "success": [row["success_rate"] for row in rows],
            "seconds_per_update": statistics.fmean(row["update_s"] for row in rows)}


# ------------------------------------------------------------------------------ TRL


def run_trl(warm: Path, seed: int, updates: int, out: Path) -> dict:
    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    s, env = SETTINGS, choice_env()
    prompts = first_prompts(env)
    dataset = Dataset.from_list([{"prompt": messages, "task_id": task_id} for task_id, messages in prompts])
    success: list[float] = []

    def reward(prompts, completions, task_id, **_):
        scores = [float(won(env, t, c[0]["content"] if isinstance(c, list) else c)) for t, c in zip(task_id, completions)]
        success.append(sum(scores) / len(scores))
        return scores

    class StepTimes(TrainerCallback):
        def __init__(self):
            self.times: list[float] = []

        def on_train_begin(self, *args, **kwargs):
            self.times.append(time.monotonic())

        def on_step_end(self, *args, **kwargs):
            self.times.append(time.monotonic())

    args = GRPOConfig(
        output_dir=str(out), seed=seed, use_cpu=True, report_to="none", save_strategy="no", disable_tqdm=True,
        logging_steps=updates, max_steps=updates, model_init_kwargs={"dtype": torch.float32},
        per_device_train_batch_size=TRL_MICRO, gradient_accumulation_steps=PROMPTS * GROUP // TRL_MICRO,
        num_generations=GROUP,
        max_completion_length=s["max_new_tokens"], temperature=s["temperature"], top_p=1.0, top_k=0,
        learning_rate=s["learning_rate"], lr_scheduler_type="constant", warmup_steps=0, beta=s["kl_coef"],
        epsilon=s["clip_eps"], entropy_coef=s["entropy_coef"], weight_decay=s["weight_decay"],
        adam_epsilon=s["adam_eps"], max_grad_norm=s["max_grad_norm"], scale_rewards="group", loss_type="dapo",
        num_iterations=1, bf16=False, fp16=False,  # fp32 as ours (TRL's default, bf16 autocast, is slow on CPU)
    )
    clock = StepTimes()
    tokenizer = AutoTokenizer.from_pretrained(warm)
    trainer = GRPOTrainer(model=str(warm), reward_funcs=reward, args=args, train_dataset=dataset,
                          processing_class=tokenizer, callbacks=[clock])
    check_prompt_ids(trainer, tokenizer, prompts)
    trainer.train()
    if len(success) != updates:
        raise RuntimeError(f"TRL scored {len(success)} generation batches in {updates} updates; expected one each")
    durations = [b - a for a, b in zip(clock.times, clock.times[1:])]
    return {"impl": "trl", "seed": seed, "success": success, "seconds_per_update": statistics.fmean(durations)}


def check_prompt_ids(trainer, tokenizer, prompts) -> None:
    """TRL must tokenise each prompt to the ids our rollout engine would send (engines/tokens.py)."""
    from evoharness_rl.engines.tokens import encode_prompt

    theirs, _, _ = trainer._tokenize_prompts([messages for _, messages in prompts])
    for (task_id, messages), ids in zip(prompts, theirs):
        if list(ids) != encode_prompt(tokenizer, messages):
            raise RuntimeError(f"TRL tokenises the prompt of {task_id} differently from our engine")


# ------------------------------------------------------------------------------ main


def warm_start(root: Path) -> Path:
    from evoharness_rl.envs.choice.warm import warm_choice_policy
    from evoharness_rl.models import init_model

    tiny = init_model("tiny", root / "tiny", seed=0)
    return warm_choice_policy(tiny, root / "warm", steps=SETTINGS["warm_steps"], seed=0, targets=tuple(TARGETS),
                              tasks=PROMPTS)


def summary(runs: list[dict]) -> list[str]:
    """The comparison, one line per implementation and the two acceptance checks."""
    lines = []
    for impl in ("ours", "trl"):
        mine = [r for r in runs if r["impl"] == impl]
        if mine:
            ends = " ".join(f"seed {r['seed']}: {statistics.fmean(r['success'][-LAST:]):.2f} "
                            f"({r['seconds_per_update']:.2f} s/update)" for r in mine)
            mean = statistics.fmean(statistics.fmean(r["success"][-LAST:]) for r in mine)
            lines.append(f"{impl:4}  success over the last {LAST} updates: {mean:.3f}  [{ends}]")
    pairs = [(o, t) for o in runs for t in runs if o["impl"] == "ours" and t["impl"] == "trl" and o["seed"] == t["seed"]]
    if pairs:
        ours = statistics.fmean(statistics.fmean(o["success"][-LAST:]) for o, _ in pairs)
        trl = statistics.fmean(statistics.fmean(t["success"][-LAST:]) for _, t in pairs)
        faster = all(o["seconds_per_update"] <= t["seconds_per_update"] for o, t in pairs)
        lines.append(f"success: ours {ours:.3f} vs TRL {trl:.3f}: {'ok' if ours >= trl - 0.05 else 'BELOW'} "
                     f"(ours >= TRL - 0.05)")
        lines.append(f"time per update: {'ok' if faster else 'SLOWER'} (ours <= TRL on every seed)")
    return lines


def main(argv=None) -> None:
    args = parse_args(argv)
    import torch

    torch.set_num_threads(1)
    out = Path(args.json)
    runs: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="peer_check-") as tmp:
        root = Path(tmp)
        warm = warm_start(root)
        for i, seed in enumerate(args.seeds):
            order = (("ours", run_ours), ("trl", run_trl))
            for impl, run in order if i % 2 == 0 else order[::-1]:
                runs.append(run(warm, seed, args.updates, root / f"{impl}-{seed}"))
                print(f"{impl} seed {seed}: success {' '.join(f'{x:.2f}' for x in runs[-1]['success'])}; "
                      f"{runs[-1]['seconds_per_update']:.2f} s/update", flush=True)
                out.write_text(json.dumps({"settings": {**SETTINGS, "targets": TARGETS, "prompts_per_update": PROMPTS,
                                                        "group_size": GROUP, "updates": args.updates},
                                           "runs": runs}, indent=1))
    print("\n".join(summary(runs)))


if __name__ == "__main__":
    main()
