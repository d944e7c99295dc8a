"""The reward of an episode (paper Sec. 2.3, Eq. 5): pure functions of a finished trajectory.

Reward of a trajectory tau at policy update u:

    R(tau; u) = R_GRPO(tau) + lambda_div(u) * R_div(tau) + lambda_eff * R_eff(tau)
    R_GRPO    = success_scale * 1[won] - invalid_penalty * #invalid - repeat_penalty * min(#repeats, repeat_cap)
    R_div     = |verbs used in tau  ∩  {track, commit, recall, note}| / 4
    lambda_div(u) = lambda_div_max / 2 * (1 + cos(pi * min(u, U) / U))
    R_eff     = 1[won] * (T_max - |tau|) / T_max        (|tau| counts env + harness + invalid steps)

It sits below both the rollout engine, which scores each episode once as it ends (stored in
`Trajectory.rewards`), and the GRPO trainer, which reads that score; the viewer scores eval
records (which carry none) with the same function.
"""

from __future__ import annotations

import math
from typing import Iterable

from evoharness_rl.harness.protocol import HARNESS_VERBS


def r_grpo(won: bool, invalid_count: int, repeat_count: int, cfg) -> float:
    """Base reward: success minus penalties for invalid actions and (capped) consecutive repeats."""
    repeats = min(repeat_count, cfg.repeat_cap)
    return cfg.success_scale * float(won) - cfg.invalid_penalty * invalid_count - cfg.repeat_penalty * repeats


def r_div(verbs_used: Iterable[str]) -> float:
    """Diversity bonus: the fraction of the four BPE verbs used at least once."""
    return len(set(verbs_used) & set(HARNESS_VERBS)) / len(HARNESS_VERBS)


def lambda_div(u: int, lambda_max: float, anneal_updates: int) -> float:
    """Cosine-annealed diversity weight: lambda_max at u=0, lambda_max/2 at U/2, 0 from u=U on."""
    if anneal_updates <= 0:
        raise ValueError(f"anneal_updates={anneal_updates} must be > 0 (the annealing horizon U in updates)")
    progress = min(max(u, 0), anneal_updates) / anneal_updates
    return lambda_max / 2.0 * (1.0 + math.cos(math.pi * progress))


def r_eff(won: bool, steps: int, max_steps: int) -> float:
    """Success-gated efficiency: the unused share of the step budget, 0 for failures."""
    if max_steps <= 0:
        raise ValueError(f"max_steps={max_steps} must be > 0 (the episode's step budget T_max)")
    return float(won) * (max_steps - min(steps, max_steps)) / max_steps


def reward_components(traj, reward_cfg, update_index: int) -> dict[str, float]:
    """All reward terms of one trajectory at policy update `update_index`.

    `traj` is a `rollout.trajectory.Trajectory`; `reward_cfg` a `config.RewardConfig`.
    Returns {"r_grpo", "r_div", "lambda_div", "r_eff", "total"}.
    """
    base = r_grpo(traj.won, traj.invalid_count, traj.repeat_count, reward_cfg)
    div = r_div(traj.verbs_used)
    lam = lambda_div(update_index, reward_cfg.lambda_div_max, reward_cfg.anneal_updates)
    eff = r_eff(traj.won, traj.steps, traj.max_steps)
    total = base + lam * div + reward_cfg.lambda_eff * eff
    return {"r_grpo": base, "r_div": div, "lambda_div": lam, "r_eff": eff, "total": total}
