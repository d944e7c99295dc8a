"""One GRPO update's training passes with micro-batches packed, or packed with shared prefixes, side by side.

    python scripts/bench_layouts.py --json bench_layouts.json          # CPU, tiny model, both sample sets

The samples are real per-turn rows. The scripted teacher plays each environment's episodes
(`--episodes`; with the harness calls of `policy.harness_rate`), every turn's chat prompt and
response is tokenised with the tiny model's tokenizer, and the trajectories go into mini-batches of
`--mini-batch` trajectories, as the trainer cuts them:

- `diagnostics`: `make diagnostics`'s tasks and settings (configs/experiment/diagnostics.yaml);
- `alfworld`: `make demo`'s ALFWorld games and settings (configs/experiment/demo.yaml; 48 train
  games, generated into `--data-dir` first).

An update is the trainer's two passes over every mini-batch: `score_samples` (the reference
logprobs) and `optimizer_step` (forward, backward, AdamW), once with `grpo.share_prefixes=false`
(layout `packed`) and once with `true` (layout `shared`), in interleaved rounds; the median round
of each is kept. `tokens` counts the samples' tokens, `tokens_read_*` what each layout hands the
model (the shared layout reads a common prefix once), and `shared_vs_packed` is packed seconds over
shared seconds (> 1: sharing is faster).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_grpo import build_model, grpo_run  # noqa: E402  (scripts/ is not a package)

ENVS = {"diagnostics": ["experiment=diagnostics"],
        # the demo's games and settings; 48 train games are enough for one update's episodes
        "alfworld": ["experiment=demo", "env.alfworld.train_games=48", "env.alfworld.valid_seen_games=2",
                     "env.alfworld.valid_unseen_games=2", "env.num_workers=1"]}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", nargs="+", default=list(ENVS), choices=list(ENVS))
    parser.add_argument("--episodes", type=int, default=96, help="teacher episodes per environment (one update's)")
    parser.add_argument("--mini-batch", type=int, default=48, help="trajectories per optimizer step")
    parser.add_argument("--micro-batch", type=int, default=64, help="grpo.micro_batch_samples")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds per layout (after one warm-up)")
    parser.add_argument("--data-dir", default="data/bench", help="where the ALFWorld games go")
    parser.add_argument("--json", help="write the results to this JSON file")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def compose(overrides: list[str]):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    from evoharness_rl.cli import config_dir
    from evoharness_rl.config import Config

    ConfigStore.instance().store(name="base_config", node=Config)
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        return OmegaConf.to_object(hydra_compose("config", overrides=overrides))


def teacher_samples(env_name: str, args, tokenizer) -> list:
    """Per-turn samples of `args.episodes` scripted episodes, trajectory index = episode."""
    from evoharness_rl.engines.scripted import ScriptedBackend
    from evoharness_rl.engines.tokens import encode_prompt
    from evoharness_rl.envs import env_factory, make_env
    from evoharness_rl.grpo.batch import Sample
    from evoharness_rl.rollout.engine import EpisodeJob, RolloutEngine, episode_settings
    from evoharness_rl.rollout.pool import EnvPool

    overrides = ENVS[env_name] + [f"seed={args.seed}", f"out_dir={tempfile.mkdtemp(prefix='bench_layouts_')}"]
    if env_name == "alfworld":
        from evoharness_rl.envs.alfworld.prepare import prepare

        overrides.append(f"env.data_dir={Path(args.data_dir) / 'alfworld'}")
        prepare(compose(overrides).env)
    cfg = compose(overrides)
    env = make_env(cfg.env)
    tasks = env.task_ids("train")
    env.close()
    jobs = [EpisodeJob(tasks[i % len(tasks)], seed=args.seed + i) for i in range(args.episodes)]
    pool = EnvPool(env_factory(cfg.env), 1, cfg.env.step_timeout_s)
    with RolloutEngine(pool, ScriptedBackend(), max_live_episodes=16, harness_rate=cfg.policy.harness_rate,
                       slip_rate=0.2) as engine:
        trajs = engine.run(jobs, episode_settings(cfg, train=True))
    eos = tokenizer.eos_token or ""
    samples = []
    for index, traj in enumerate(trajs):
        for turn in traj.turns:
            prompt = encode_prompt(tokenizer, turn.messages)
            completion = tokenizer(turn.response + eos, add_special_tokens=False)["input_ids"]
            ids = prompt + completion
            old = [-0.5] * len(completion)
            samples.append(Sample(ids, [0] * len(prompt) + [1] * len(completion), [0.0] * len(prompt) + old,
                                  advantage=1.0 if index % 2 else -1.0, trajectory=index))
    return samples


def bench(env_name: str, args) -> dict:
    from evoharness_rl.grpo import batch as B
    from evoharness_rl.grpo.trainer import layout, optimizer_step, score_samples
    from evoharness_rl.models import init_model, load_tokenizer

    model_dir = init_model("tiny", tempfile.mkdtemp(prefix="bench-layouts-"))
    samples = teacher_samples(env_name, args, load_tokenizer(str(model_dir)))
    model = build_model("tiny", "cpu", torch.float32)
    reference = build_model("tiny", "cpu", torch.float32).requires_grad_(False).eval()
    reference.load_state_dict(model.state_dict())
    run = grpo_run(model, reference, "cpu", args.micro_batch)
    trajectories = sorted({s.trajectory for s in samples})
    minis = [[s for s in samples if s.trajectory in set(trajectories[i:i + args.mini_batch])]
             for i in range(0, len(trajectories), args.mini_batch)]

    def update():
        for mini in minis:
            score_samples(run, mini)
            optimizer_step(run, mini)

    out = {"samples": len(samples), "tokens": sum(len(s.input_ids) for s in samples)}
    seconds: dict[str, list[float]] = {"packed": [], "shared": []}
    for r in range(args.rounds + 1):
        for shape in seconds:
            run.cfg.grpo.share_prefixes = shape == "shared"
            assert layout(run) == shape, f"the tiny model does not support the {shape} layout"
            start = time.perf_counter()
            update()
            if r:
                seconds[shape].append(time.perf_counter() - start)
    for shape in seconds:
        batches = [B.build(rows, 0, shape) for mini in minis for rows in B.micro_batches(mini, args.micro_batch, shape)]
        out[f"tokens_read_{shape}"] = sum(b.tokens for b in batches)
        out[f"{shape}_s"] = statistics.median(seconds[shape])
    out["shared_vs_packed"] = out["packed_s"] / out["shared_s"]
    return out


def main() -> None:
    args = parse_args()
    from evoharness_rl.runlog import cpu_model, set_progress

    set_progress(False)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    results: dict = {"cpu": cpu_model(), "threads": torch.get_num_threads(), "command": " ".join(sys.argv)}
    print(f"{'env':>12} {'samples':>8} {'tokens':>8} {'read packed':>12} {'read shared':>12} {'packed s':>9} "
          f"{'shared s':>9} {'ratio':>6}")
    for env_name in args.envs:
        r = results[env_name] = bench(env_name, args)
        print(f"{env_name:>12} {r['samples']:>8} {r['tokens']:>8} {r['tokens_read_packed']:>12} "
              f"{r['tokens_read_shared']:>12} {r['packed_s']:>9.2f} {r['shared_s']:>9.2f} {r['shared_vs_packed']:>6.2f}",
              flush=True)
    if args.json:
        from evoharness_rl.fileio import atomic_write_json

        atomic_write_json(args.json, results)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
