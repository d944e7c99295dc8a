"""The episode reward (evoharness_rl/reward.py) against values computed by hand (arithmetic in the comments)."""

from __future__ import annotations

import math

import pytest

from evoharness_rl import reward
from evoharness_rl.config import RewardConfig
from evoharness_rl.rollout.trajectory import Trajectory


def test_r_grpo_penalises_invalid_and_capped_repeats():
    cfg = RewardConfig(success_scale=10.0, invalid_penalty=0.1, repeat_penalty=0.1, repeat_cap=10)
    # 10 * 1 - 0.1 * 3 - 0.1 * min(12, 10) = 10 - 0.3 - 1.0 = 8.7
    assert reward.r_grpo(True, 3, 12, cfg) == pytest.approx(8.7)
    # failure: 0 - 0.1 * 2 - 0.1 * 1 = -0.3
    assert reward.r_grpo(False, 2, 1, cfg) == pytest.approx(-0.3)


def test_r_div_counts_distinct_bpe_verbs_only():
    assert reward.r_div({"track", "note", "go to shelf 1"}) == 0.5  # 2 of 4
    assert reward.r_div(["recall", "recall", "commit", "track", "note"]) == 1.0
    assert reward.r_div(set()) == 0.0


@pytest.mark.parametrize(
    "u, expected",
    [
        (0, 1.0),  # 1/2 * (1 + cos 0) = 1
        (25, 0.5 * (1 + math.cos(math.pi / 4))),  # 0.853553...
        (50, 0.5),  # 1/2 * (1 + cos(pi/2)) = 0.5
        (100, 0.0),  # 1/2 * (1 + cos(pi)) = 0
        (250, 0.0),  # min(u, U) = U: stays 0 after annealing
    ],
)
def test_lambda_div_follows_cosine_schedule(u, expected):
    assert reward.lambda_div(u, lambda_max=1.0, anneal_updates=100) == pytest.approx(expected, abs=1e-12)


def test_lambda_div_scales_with_lambda_max_and_is_monotone():
    values = [reward.lambda_div(u, 0.02, 30) for u in range(40)]
    assert values[0] == pytest.approx(0.02)
    assert all(a >= b for a, b in zip(values, values[1:]))
    assert values[-1] == 0.0
    with pytest.raises(ValueError, match="anneal_updates"):
        reward.lambda_div(0, 1.0, 0)


def test_r_eff_is_success_gated_share_of_unused_budget():
    assert reward.r_eff(True, 20, 70) == pytest.approx(50 / 70)
    assert reward.r_eff(False, 20, 70) == 0.0
    assert reward.r_eff(True, 70, 70) == 0.0
    with pytest.raises(ValueError, match="max_steps"):
        reward.r_eff(True, 1, 0)


def test_reward_components_of_a_trajectory():
    traj = Trajectory(task_id="t", family="f", env="e", won=True, steps=10, max_steps=50, invalid_count=1,
                      repeat_count=2, harness_calls={"track": 2, "recall": 1, "note": 0})
    cfg = RewardConfig(success_scale=10.0, invalid_penalty=0.1, repeat_penalty=0.1, repeat_cap=10,
                       lambda_div_max=1.0, anneal_updates=100, lambda_eff=1.0)
    out = reward.reward_components(traj, cfg, update_index=50)
    # r_grpo = 10 - 0.1 - 0.2 = 9.7; r_div = |{track, recall}| / 4 = 0.5 (note used 0 times)
    # lambda_div(50 of 100) = 0.5; r_eff = (50 - 10) / 50 = 0.8; total = 9.7 + 0.25 + 0.8 = 10.75
    assert out == pytest.approx({"r_grpo": 9.7, "r_div": 0.5, "lambda_div": 0.5, "r_eff": 0.8, "total": 10.75})


def test_ablations_zero_their_terms():
    traj = Trajectory(task_id="t", family="f", env="e", won=True, steps=10, max_steps=50,
                      harness_calls={"track": 1, "commit": 1, "recall": 1, "note": 1})
    no_div = reward.reward_components(traj, RewardConfig(lambda_div_max=0.0), 0)
    no_eff = reward.reward_components(traj, RewardConfig(lambda_eff=0.0), 0)
    assert no_div["total"] == pytest.approx(10.0 + 0.8)  # r_grpo + r_eff
    assert no_eff["total"] == pytest.approx(10.0 + 1.0)  # r_grpo + lambda_div(0) * 1
