"""What `experience.validate_edits` costs: seconds per GRPO update with the edit check off and on.

    python scripts/bench_edit_check.py [--updates 4] [--validate-tasks 2] [--json bench_edit_check.json]

Two short CPU GRPO runs of the same policy on generated ALFWorld games (small games,
compact prompts, adaptive harness, heuristic consolidation between batches): one with
the check off, one with it on. The policy is a local `init-model` checkpoint (`--size`, or
`--model DIR` for a real one); a random tiny policy fails every episode, so its episodes
run to the step budget -- the check's worst case in time -- and every cycle is kept (0
against 0). Prints, per run, the mean update time, rollout time and consolidation phase's
time (`sync_consolidate_s`, which holds the check); for the run with the check, the check's
seconds per played cycle, the cycles played and rolled back, and the check's share of
the update time. The check plays `2 x validate_tasks` greedy episodes per played cycle,
against the update's `prompts x group` sampled ones.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--updates", type=int, default=4, help="GRPO updates per run")
    parser.add_argument("--prompts", type=int, default=4, help="grpo.prompts_per_update")
    parser.add_argument("--group", type=int, default=4, help="grpo.group_size")
    parser.add_argument("--validate-tasks", type=int, default=2, help="experience.validate_tasks of the run with the check")
    parser.add_argument("--max-steps", type=int, default=10, help="env.max_steps_train and env.max_steps_eval")
    parser.add_argument("--max-new-tokens", type=int, default=24, help="policy.max_new_tokens")
    parser.add_argument("--train-games", type=int, default=12, help="generated ALFWorld train games")
    parser.add_argument("--size", default="tiny", help="init-model size of the policy (tiny | mini | small | base)")
    parser.add_argument("--model", help="a checkpoint directory instead of a fresh init-model policy")
    parser.add_argument("--data-dir", default="data/bench", help="where the ALFWorld games go")
    parser.add_argument("--json", help="write the results to this JSON file")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def config(args, model: str, out_dir: Path, check: bool):
    from evoharness_rl.config import Config, validate

    cfg = Config(command="grpo", out_dir=str(out_dir), seed=args.seed, device="cpu")
    cfg.model = replace(cfg.model, path=model)
    cfg.env = replace(cfg.env, name="alfworld", data_dir=str(Path(args.data_dir) / "alfworld"), prompt_style="compact",
                      max_steps_train=args.max_steps, max_steps_eval=args.max_steps, num_workers=1)
    cfg.env.alfworld = replace(cfg.env.alfworld, size="small", train_games=args.train_games, valid_seen_games=1,
                               valid_unseen_games=1, generator_seed=args.seed)
    cfg.policy = replace(cfg.policy, backend="hf", max_new_tokens=args.max_new_tokens, max_prompt_tokens=2048)
    cfg.grpo = replace(cfg.grpo, updates=args.updates, prompts_per_update=args.prompts, group_size=args.group,
                       mini_batch_trajectories=args.prompts * args.group, eval_every=0, save_every=args.updates,
                       keep_trajectories=0)
    cfg.experience = replace(cfg.experience, consolidator="heuristic", validate_edits=check,
                             validate_tasks=args.validate_tasks)
    cfg.logger = replace(cfg.logger, progress=False)
    return validate(cfg)


def summarise(rows: list[dict], check: bool, wall_s: float) -> dict:
    update_s = statistics.mean(r["update_s"] for r in rows)
    out = {"validate_edits": check, "updates": len(rows), "wall_s": round(wall_s, 1), "update_s": round(update_s, 3),
           "rollout_s": round(statistics.mean(r["rollout_s"] for r in rows), 3),
           "sync_consolidate_s": round(statistics.mean(r["sync_consolidate_s"] for r in rows), 3),
           "episodes_per_update": rows[0]["episodes"]}
    if check:
        played = [r for r in rows if "experience/validate_old_success" in r]
        per_check = statistics.mean(r["experience/validate_s"] for r in played) if played else 0.0
        out.update(cycles_played=len(played), rolled_back=int(sum(r["experience/rolled_back"] for r in rows)),
                   check_s_per_played_cycle=round(per_check, 3),
                   check_episodes_per_played_cycle=played[0]["experience/validate_episodes"] if played else 0,
                   check_share_of_update=round(sum(r["experience/validate_s"] for r in rows)
                                               / sum(r["update_s"] for r in rows), 4),
                   scores=[[r.get("experience/validate_old_success"), r.get("experience/validate_new_success")]
                           for r in rows])
    return out


def main() -> None:
    import torch

    from evoharness_rl.envs.alfworld.prepare import prepare
    from evoharness_rl.grpo.trainer import run_grpo
    from evoharness_rl.models import init_model
    from evoharness_rl.runlog import read_metrics, set_progress

    args = parse_args()
    torch.set_num_threads(1)
    set_progress(False)
    root = Path(tempfile.mkdtemp(prefix="bench_edit_check_"))
    model = args.model or str(init_model(args.size, root / "model"))
    prepare(config(args, model, root / "prepare", check=False).env)
    results = []
    for check in (False, True):
        out_dir = root / f"check_{'on' if check else 'off'}"
        start = time.monotonic()
        run_grpo(config(args, model, out_dir, check))
        results.append(summarise(read_metrics(out_dir), check, time.monotonic() - start))
        print(json.dumps(results[-1]), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
