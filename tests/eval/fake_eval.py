"""Run `evaluate` on the fake env (used in-process and as a subprocess by the resume test).

    python fake_eval.py OUT_DIR [STEP_DELAY_S]
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[2]))  # run as a script: the checkout root, for tests.fakes

from tests.fakes.steps import TeacherBackend, make_fake_env  # noqa: E402

from evoharness_rl.config import Config  # noqa: E402
from evoharness_rl.eval.evaluate import evaluate  # noqa: E402
from evoharness_rl.rollout.engine import RolloutEngine  # noqa: E402
from evoharness_rl.rollout.pool import EnvPool  # noqa: E402
from evoharness_rl.runlog import set_progress  # noqa: E402


def fake_config(out_dir: str, **overrides) -> Config:
    cfg = Config(out_dir=str(out_dir), split="valid_seen", episodes_per_task=2, seed=3)
    cfg.policy.backend = "scripted"
    cfg.policy.harness_rate = 0.3
    cfg.env.max_steps_eval = 12
    for key, value in overrides.items():
        section, _, name = key.rpartition(".")
        setattr(getattr(cfg, section) if section else cfg, name, value)
    return cfg


def fake_engine(step_delay_s: float = 0.0, max_live: int = 4, **backend_kwargs) -> RolloutEngine:
    pool = EnvPool(functools.partial(make_fake_env, 3, step_delay_s), num_workers=2, step_timeout_s=30)
    return RolloutEngine(pool, TeacherBackend(**backend_kwargs), max_live_episodes=max_live, harness_rate=0.3)


def run(out_dir: str, step_delay_s: float = 0.0, **overrides) -> dict:
    set_progress(False)
    return evaluate(fake_config(out_dir, **overrides), engine=fake_engine(step_delay_s))


if __name__ == "__main__":
    run(sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 0.0)
