"""The advantage-estimator registry: a new estimator joins from outside the package and trains end to end."""

from __future__ import annotations

import functools

import pytest
import torch

from evoharness_rl.config import ConfigError
from evoharness_rl.grpo.estimators import ADV_ESTIMATORS, check_adv_est, register_adv_est
from evoharness_rl.runlog import read_metrics

CALLS: list[list[float]] = []  # the rewards each call of the toy estimator saw


@register_adv_est("leave_one_out_test")
def leave_one_out(rewards, group_ids, grpo_cfg, batch_std):
    """RLOO: A_i = r_i - the mean of the other members of its group = n / (n - 1) * (r_i - group mean)."""
    CALLS.append(rewards.tolist())
    adv = torch.zeros_like(rewards)
    for g in group_ids.unique():
        members = group_ids == g
        n = int(members.sum())
        adv[members] = n / (n - 1) * (rewards[members] - rewards[members].mean())
    tied = torch.stack([rewards[group_ids == g].std() < grpo_cfg.adv_eps for g in group_ids])
    return adv, tied


def test_the_default_estimator_is_grpo():
    # rewards 1, 3 in one group: centred -1, +1, sample std sqrt(2) -> -1/sqrt(2), +1/sqrt(2)
    from evoharness_rl.config import GRPOConfig

    adv, zero = check_adv_est(GRPOConfig().advantage_estimator)(
        torch.tensor([1.0, 3.0], dtype=torch.float64), torch.tensor([0, 0]), GRPOConfig(), 0.0)
    assert adv.tolist() == pytest.approx([-(0.5**0.5), 0.5**0.5], abs=1e-5) and not zero.any()


def test_a_taken_name_or_an_unknown_one_is_refused():
    with pytest.raises(ValueError, match="'grpo' is already registered"):
        register_adv_est("grpo")(leave_one_out)
    assert register_adv_est("leave_one_out_test")(leave_one_out) is leave_one_out  # the same function again: fine
    with pytest.raises(ConfigError, match=r"grpo.advantage_estimator='nope' is not registered; registered: .*grpo"):
        check_adv_est("nope")
    assert ADV_ESTIMATORS["leave_one_out_test"] is leave_one_out


def test_an_unregistered_estimator_fails_before_anything_loads(tmp_path):
    from evoharness_rl.grpo.trainer import run_grpo
    from tests.fakes.count import make_count_env, tiny_config

    cfg = tiny_config(tmp_path / "no-model-here", tmp_path / "run", advantage_estimator="nope")
    with pytest.raises(ConfigError, match="grpo.advantage_estimator='nope'"):
        run_grpo(cfg, env_factory=make_count_env)  # a missing model would fail later, with another message
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_a_registered_estimator_trains_end_to_end(warm_model_dir, tmp_path):
    from evoharness_rl.grpo.trainer import run_grpo
    from tests.fakes.count import make_count_env, tiny_config

    CALLS.clear()
    cfg = tiny_config(warm_model_dir, tmp_path / "run", updates=1, advantage_estimator="leave_one_out_test")
    run_grpo(cfg, env_factory=functools.partial(make_count_env))
    (row,) = read_metrics(tmp_path / "run")
    assert len(CALLS) == 1 and len(CALLS[0]) == 8  # one call per update, every episode's reward
    rewards = CALLS[0]
    expected = []  # by hand: groups of 4 in job order, A_i = 4/3 * (r_i - group mean)
    for start in (0, 4):
        group = rewards[start:start + 4]
        if max(group) - min(group) > 1e-6:
            expected += [4 / 3 * (r - sum(group) / 4) for r in group]
    assert expected, f"both groups tied ({rewards}): nothing to compare"
    assert row["adv_min"] == pytest.approx(min(expected)) and row["adv_max"] == pytest.approx(max(expected))
    assert row["optimizer_steps"] == 2 and row["loss_tokens"] > 0
