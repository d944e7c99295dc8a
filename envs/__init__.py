"""Environment adapters (installed as `evoharness_rl.envs`).

Each environment is one folder with an adapter implementing `base.Environment`.
`make_env(cfg)` builds the configured one; adapters import lazily so that a missing
optional dependency only matters for the environment that needs it.
"""

from __future__ import annotations

from typing import Any

from evoharness_rl.envs.base import Environment, EnvSpec, StepResult, Task, Teacher

__all__ = ["Environment", "EnvSpec", "StepResult", "Task", "Teacher", "make_env", "ENV_NAMES"]

ENV_NAMES = ("alfworld", "webshop")


def make_env(env_cfg: Any) -> Environment:
    """Build the adapter named by `env_cfg.name` from an `EnvConfig`."""
    if env_cfg.name == "alfworld":
        from evoharness_rl.envs.alfworld.adapter import AlfworldEnv

        return AlfworldEnv.from_config(env_cfg)
    if env_cfg.name == "webshop":
        from evoharness_rl.envs.webshop.adapter import make_webshop_env

        return make_webshop_env(env_cfg)
    raise ValueError(
        f"env.name={env_cfg.name!r} has no adapter in this version; available: {', '.join(ENV_NAMES)}"
    )
