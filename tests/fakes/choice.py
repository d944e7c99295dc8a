"""`choice` (evoharness_rl.envs.choice) for tests: the environment in which GRPO is shown to learn.

The CI proof of learning (tests/grpo/test_grpo_learns.py) uses one target, "green": the
policy goes from 0.30 to 0.9 within about 10 updates (tiny model, 30 prompts x 4 per
update, lr 1e-3). With the three colours it must copy the colour from the objective, which
takes about 40 updates from reward alone (scripts/peer_check.py).
"""

from __future__ import annotations

from pathlib import Path

from evoharness_rl.envs.choice import COLOURS, ChoiceEnv, make_choice_env  # noqa: F401  (re-exported)
from evoharness_rl.envs.choice.adapter import SPEC, SYSTEM  # noqa: F401  (re-exported)
from evoharness_rl.envs.choice.warm import warm_choice_policy as _warm

ONE_TARGET = ("green",)


def warm_choice_policy(model_dir: Path, out_dir: Path, steps: int = 120, seed: int = 0) -> Path:
    """The warm start of the one-target task (envs/choice/warm.py)."""
    return _warm(model_dir, out_dir, steps=steps, seed=seed, targets=ONE_TARGET)
