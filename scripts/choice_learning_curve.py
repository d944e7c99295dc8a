"""The GRPO learning curve of tests/grpo/test_grpo_learns.py (tiny model, `choice` env, 16 updates), per update.

    python scripts/choice_learning_curve.py OUT_DIR [seed=N] [GRPO_FIELD=VALUE ...]   # e.g. kl_clamp=false

Writes OUT_DIR/summary.json: wall time and, per update, success, KL to the reference (mean and largest
unclamped k3 where logged), tied groups and optimizer steps. Runs on CPU in a few minutes.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: tests.fakes holds the env and warm start

from evoharness_rl.envs import register_env  # noqa: E402

register_env("choice", "tests.fakes.choice:make_choice_env")  # at import: environment workers need it too

KEEP = ("update", "success_rate", "kl_ref", "kl_ref_max", "zero_std_groups", "optimizer_steps", "loss_tokens",
        "adv_abs_mean", "val/success/green")


def main(out: Path, overrides: dict[str, str]) -> None:
    import torch

    from evoharness_rl.grpo.trainer import run_grpo
    from evoharness_rl.models import init_model
    from tests.fakes.choice import warm_choice_policy
    from tests.fakes.count import tiny_config

    torch.set_num_threads(1)
    policy = warm_choice_policy(init_model("tiny", out / "models" / "tiny"), out / "models" / "choice")
    cfg = tiny_config(policy, out / "run", updates=16, prompts_per_update=30, group_size=4,
                      mini_batch_trajectories=120, micro_batch_samples=64, learning_rate=1e-3, save_every=16,
                      eval_every=16, eval_limit=6)  # as tests/grpo/test_grpo_learns.py
    cfg.env.name, cfg.harness.mode = "choice", "env_only"
    cfg.env.max_steps_train = cfg.env.max_steps_eval = 3
    cfg.policy.max_new_tokens = 16
    cfg.seed = int(overrides.pop("seed", 0))
    for key, value in overrides.items():
        current = getattr(cfg.grpo, key)
        setattr(cfg.grpo, key, value == "true" if isinstance(current, bool) else type(current)(value))
    start = time.time()
    run_grpo(cfg)
    rows = [json.loads(line) for line in (out / "run" / "metrics.jsonl").read_text().splitlines()]
    rows = [{k: r[k] for k in KEEP if k in r} for r in rows if "update" in r]
    (out / "summary.json").write_text(json.dumps({"wall_s": time.time() - start, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]), dict(arg.split("=", 1) for arg in sys.argv[2:]))
