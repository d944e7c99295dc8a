"""Advantage estimators by name (`grpo.advantage_estimator`), registered as in verl's `register_adv_est`.

An estimator turns the rewards of one update's trajectories into one advantage each:

    estimator(rewards, group_ids, grpo_cfg, batch_std) -> (advantages, zero_std_mask)

    rewards        [N] float64  R(tau; u) of each trajectory that did not error (this process's)
    group_ids      [N] int      its task group (a group never crosses processes)
    grpo_cfg       config.GRPOConfig of the run (adv_eps, scale_rewards, ...)
    batch_std      float        sample std of every reward of the update, over all processes
    advantages     [N]          one per trajectory
    zero_std_mask  [N] bool     trajectories whose group carries no signal (counted in zero_std_groups;
                                they stay in the loss for its KL term, with the advantage returned)

A new estimator joins by registering, without touching the trainer:

    from evoharness_rl.grpo.estimators import register_adv_est

    @register_adv_est("rloo")
    def rloo(rewards, group_ids, grpo_cfg, batch_std): ...

and is chosen with `grpo.advantage_estimator=rloo` (checked by `check_adv_est` before anything heavy loads).
"""

from __future__ import annotations

from typing import Callable

import torch

from evoharness_rl.config import ConfigError
from evoharness_rl.grpo import core

AdvantageEstimator = Callable[[torch.Tensor, torch.Tensor, object, float], tuple[torch.Tensor, torch.Tensor]]
ADV_ESTIMATORS: dict[str, AdvantageEstimator] = {}


def register_adv_est(name: str) -> Callable[[AdvantageEstimator], AdvantageEstimator]:
    """Decorator: register `fn` as the advantage estimator `name` (another function under a taken name is refused)."""

    def add(fn: AdvantageEstimator) -> AdvantageEstimator:
        if ADV_ESTIMATORS.get(name, fn) is not fn:
            raise ValueError(f"advantage estimator {name!r} is already registered ({ADV_ESTIMATORS[name].__qualname__})"
                             "; register yours under another name")
        ADV_ESTIMATORS[name] = fn
        return fn

    return add


def check_adv_est(name: str) -> AdvantageEstimator:
    """The estimator registered as `name`; a ConfigError naming the registered ones otherwise."""
    if name not in ADV_ESTIMATORS:
        raise ConfigError(f"grpo.advantage_estimator={name!r} is not registered; registered: "
                          f"{', '.join(sorted(ADV_ESTIMATORS))} (evoharness_rl.grpo.estimators.register_adv_est adds one)")
    return ADV_ESTIMATORS[name]


@register_adv_est("grpo")
def grpo(rewards: torch.Tensor, group_ids: torch.Tensor, grpo_cfg, batch_std: float):
    """The paper's GRPO: centred within each group, divided by grpo.scale_rewards (core.group_advantages)."""
    return core.group_advantages(rewards, group_ids, grpo_cfg.adv_eps, scale=grpo_cfg.scale_rewards,
                                 batch_std=batch_std)
