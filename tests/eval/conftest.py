"""Eval tests reuse the fake env and backends of tests/fakes/steps.py."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))


import pytest  # noqa: E402


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> str:
    """A tiny local Qwen3 checkpoint (`init-model size=tiny`), built once per session."""
    from evoharness_rl.models import init_model

    return str(init_model("tiny", tmp_path_factory.mktemp("tiny") / "model", seed=0))


@pytest.fixture(scope="session")
def webshop_data(tmp_path_factory) -> dict:
    """Overrides for a small prepared WebShop simulator catalogue."""
    return {"env.data_dir": str(tmp_path_factory.mktemp("webshop_data")), "env.webshop.num_products": 300,
            "env.webshop.num_goals": 60, "env.webshop.test_goals": 20}


@pytest.fixture(scope="session")
def alfworld_data(tmp_path_factory) -> dict:
    """Overrides for a few generated ALFWorld games (small rooms), prepared once per session."""
    pytest.importorskip("alfworld")
    from evoharness_rl.config import EnvConfig
    from evoharness_rl.envs.alfworld.prepare import prepare

    overrides = {"env.data_dir": str(tmp_path_factory.mktemp("alfworld_data")), "env.alfworld.train_games": 1,
                 "env.alfworld.valid_seen_games": 6, "env.alfworld.valid_unseen_games": 0}
    env_cfg = EnvConfig(data_dir=overrides["env.data_dir"])
    env_cfg.alfworld.train_games, env_cfg.alfworld.valid_seen_games, env_cfg.alfworld.valid_unseen_games = 1, 6, 0
    prepare(env_cfg)
    return overrides
