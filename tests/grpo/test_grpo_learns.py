"""Proof that the trainer learns: the real GRPO loop (HF backend, loss, masks, advantages, AdamW, KL) takes a
warm-started tiny policy from chance (one button in three) to near-certain success on the `choice` env."""

from __future__ import annotations

import json

import pytest

from tests.fakes.choice import warm_choice_policy
from tests.fakes.count import tiny_config

pytestmark = pytest.mark.slow
UPDATES = 16


@pytest.fixture(scope="module")
def choice_policy(tiny_model_dir, tmp_path_factory):
    return warm_choice_policy(tiny_model_dir, tmp_path_factory.mktemp("models") / "choice")


def test_grpo_takes_training_success_from_chance_to_090(choice_policy, tmp_path):
    from evoharness_rl.grpo.trainer import run_grpo

    cfg = tiny_config(choice_policy, tmp_path / "run", updates=UPDATES, prompts_per_update=30, group_size=4,
                      mini_batch_trajectories=120, micro_batch_samples=64, learning_rate=1e-3, save_every=UPDATES,
                      eval_every=UPDATES, eval_limit=6)
    cfg.env.name, cfg.harness.mode = "choice", "env_only"
    cfg.env.choice.targets = ["green"]  # one target: the objective says nothing the policy needs
    cfg.env.max_steps_train = cfg.env.max_steps_eval = 3
    cfg.policy.max_new_tokens = 16
    run_grpo(cfg)

    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    updates = [r for r in rows if "success_rate" in r and "update" in r]
    success = [r["success_rate"] for r in updates]
    assert len(success) == UPDATES
    assert success[0] < 0.6, success  # the warm start guesses
    assert max(success[-3:]) >= 0.9, success  # GRPO taught it to read the objective
    assert updates[-1]["val/success/green"] >= 0.9  # and greedy validation agrees
