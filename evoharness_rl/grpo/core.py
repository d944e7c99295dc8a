"""The cost-aware GRPO algorithm core: group advantages, step advantages, the horizon schedule, the policy loss.

Pure functions of numbers and tensors (no I/O, no model), so each piece can be read
against the paper and tested against hand-computed values. The reward R(tau; u) they
start from is `evoharness_rl/reward.py` (scored once per episode by the rollout engine).

Advantages (GRPO, Shao et al. 2024): rewards are centred within each task's group and
divided by a scale (`scale`):
- `group` (the paper's GRPO): A_i = (r_i - mean_g) / (std_g + eps), with the *sample*
  standard deviation of the group (Bessel's correction, as in TRL and verl);
- `batch`: A_i = (r_i - mean_g) / (std_B + eps), std_B the sample std of every reward of
  the update (TRL's scale_rewards="batch"): a group whose members differ only by small
  penalties keeps a small advantage instead of being blown up to unit scale;
- `none`: A_i = r_i - mean_g (Dr. GRPO, Liu et al. 2025), advantages in reward units.
A group whose std is below `eps` (all members got the same reward, or the group has one
member) has no learning signal: its advantages are exactly 0 and it is reported in
`zero_std_mask`, whatever the scale.

Step-level advantages (per-turn context; GiGPO, Feng et al. 2025), added to the trajectory's
with weight omega (`grpo.step_advantage_weight`; 0: the paper's trajectory-level GRPO):

    r_t   = -invalid_penalty * 1[turn t invalid] - repeat_penalty * 1[turn t repeats t-1]
            (+ the rest of R(tau; u) on the last turn, so that with gamma = 1, G_0 = R(tau; u))
    G_t   = r_t + gamma * G_{t+1}                                   (discounted return from turn t)
    A_t   = A_tau + omega * group_advantages(G, anchor)_t
The anchor of a turn is the environment state it acted in, within its task's group: the
observation of the last environment action before it (invalid actions and harness calls leave
the environment as it was; the first turns share the start state). A state reached in several
episodes, or several times in one (a loop of rejected actions), forms a step group that
compares the returns that followed each action taken there; a state seen once gives no step
advantage. As in GiGPO the anchor is the environment's observation, not the whole prompt
(history and harness views differ between episodes that stand in the same state).
Two options move this towards GiGPO exactly (defaults: as described above):
- `grpo.step_anchor=observation`: the anchor is the observation text each turn was shown, so
  a rejected action ("Nothing happens.") or a harness view starts a state of its own instead
  of leaving the turn in the state of the last environment action;
- `grpo.step_keep_tied_groups`: a group whose episode rewards tie (no trajectory advantage)
  still gets step advantages; by default its turns get none.

Policy loss (PPO clipped surrogate, per token t of sequence i):

    ratio      = exp(logp - old_logp)                     old_logp: the behaviour (sampling) logprobs
    pg_loss    = max(-A_i * ratio, -A_i * clip(ratio, 1 - eps, 1 + eps))
    kl         = exp(ref_logp - logp) - (ref_logp - logp) - 1      (k3 estimator of KL(pi || pi_ref))
    token_loss = pg_loss + kl_coef * kl - entropy_coef * entropy

Off-policy correction (decoupled PPO, Hilton et al. 2022, as AReaL uses it for asynchronous RL;
`behaviour_logp` given): a batch sampled by an older policy (grpo.max_staleness > 0) is trained
against the *proximal* policy -- the policy as it is when the update starts, whose logprobs the
update's no-grad pass recomputes into `old_logp` -- and each token is reweighted by how much more
the proximal policy likes it than the behaviour policy that sampled it:

    ratio      = exp(logp - old_logp)                     old_logp: the proximal logprobs
    is_weight  = min(exp(old_logp - behaviour_logp), is_cap)     (truncated importance weight, no gradient)
    pg_loss    = is_weight * max(-A_i * ratio, -A_i * clip(ratio, 1 - eps, 1 + eps))

The clip keeps each update within eps of the proximal policy (a trust region around the current
weights, not the stale ones); the weight corrects the sampling distribution. When the sampler *is*
the proximal policy, is_weight = 1 and the loss is the synchronous one. `is_clip_frac` reports the
share of tokens whose weight the cap truncated.

The k3 term is unbounded: one token the policy has moved far from the reference (log-ratio 10 gives
k3 ~ 22,000) can dominate a mini-batch. With `kl_clamp` (grpo.kl_clamp, as verl's `kl_penalty`) the
log-ratio ref_logp - logp is clamped to [-20, 20] and k3 to at most 10; a clamped token's KL gradient
is 0. `kl_ref_max` reports the largest *unclamped* k3 of the batch, so a clamp that bites is seen.

Token aggregation (`agg`):
- `token_mean`: sum of token_loss over every loss token of the mini-batch / number of
  those tokens (each generated token weighs the same; long responses weigh more);
- `seq_mean`: each sequence's token_loss averaged over its own loss tokens, then averaged
  over sequences (each sample weighs the same);
- `traj_mean`: each row's token_loss summed and divided by `traj_tokens`, the loss tokens of
  the row's whole trajectory (all its turns), then averaged over trajectories: each
  trajectory weighs the same however many turns it took. With per-turn samples and
  `token_mean`, a trajectory weighs by its number of turns; failures run to the horizon
  while successes stop early, so within a group sum_i A_i * n_i < 0 and every token the
  policy emits in most turns (the response format, common commands) is pushed down by the
  group's long failures, although the centred advantages sum to zero. `traj_mean` makes
  each group's weighted advantages sum to zero again. For one row per trajectory
  (accumulated context) it equals `seq_mean`.
With micro-batches (gradient accumulation) or several processes, pass `denom` = the
mini-batch's token count (token_mean), sequence count (seq_mean) or trajectory count
(traj_mean) divided by the number of processes, so that the sum of micro-batch losses,
averaged over processes by DDP, is exactly the mini-batch mean.
"""

from __future__ import annotations

import torch

from evoharness_rl.config import ADVANTAGE_SCALES, LOSS_AGGREGATIONS, STEP_ANCHORS  # the choices, stated once

KL_LOG_RATIO_BOUND = 20.0  # kl_clamp: ref_logp - logp clamped to [-20, 20] (verl)
KL_K3_MAX = 10.0  # kl_clamp: k3 clamped to at most 10 (verl)


# ----------------------------------------------------------------------- schedules


def horizon(u: int, updates: int, curriculum: list[int], default: int) -> int:
    """Training step budget at update u: `curriculum` split into equal phases over `updates`.

    [8, 10, 15] over 300 updates: 8 for u < 100, 10 for u < 200, 15 after. [] -> `default`.
    """
    if not curriculum:
        return default
    phase = min(max(u, 0) * len(curriculum) // max(updates, 1), len(curriculum) - 1)
    return curriculum[phase]


# -------------------------------------------------------------------------- advantages


def group_advantages(
    rewards: torch.Tensor,  # [N] one scalar reward per trajectory
    group_ids: torch.Tensor,  # [N] integer id of each trajectory's group (its task)
    eps: float = 1e-6,
    scale: str = "group",
    batch_std: float | None = None,  # scale="batch": the std of the whole update's rewards (None: of `rewards`)
) -> tuple[torch.Tensor, torch.Tensor]:
    """Group-centred advantages divided by the group's, the batch's or no std (module docstring).

    Returns (advantages [N], zero_std_mask [N]); trajectories of zero-variance groups
    (std < eps, including one-member groups) get advantage exactly 0 and mask True.
    With several processes, pass `batch_std` computed over every process's rewards.
    """
    if rewards.dim() != 1 or rewards.shape != group_ids.shape:
        raise ValueError(f"rewards {tuple(rewards.shape)} and group_ids {tuple(group_ids.shape)} must both be [N]")
    if scale not in ADVANTAGE_SCALES:
        raise ValueError(f"scale={scale!r}; expected one of {ADVANTAGE_SCALES}")
    _, inverse = torch.unique(group_ids, return_inverse=True)  # [N] dense group index
    num_groups = int(inverse.max()) + 1 if len(inverse) else 0
    count = torch.zeros(num_groups, dtype=rewards.dtype).index_add_(0, inverse, torch.ones_like(rewards))  # [G]
    mean = torch.zeros(num_groups, dtype=rewards.dtype).index_add_(0, inverse, rewards) / count  # [G]
    centred = rewards - mean[inverse]  # [N]
    sq = torch.zeros(num_groups, dtype=rewards.dtype).index_add_(0, inverse, centred**2)  # [G]
    std = torch.sqrt(sq / (count - 1).clamp(min=1))  # [G] sample std (0 for one-member groups)
    zero_std = (std < eps)[inverse]  # [N]
    if scale == "group":
        scaled = centred / (std[inverse] + eps)
    elif scale == "batch":
        if batch_std is None:
            batch_std = float(rewards.std()) if len(rewards) > 1 else 0.0
        scaled = centred / (batch_std + eps)
    else:
        scaled = centred
    adv = torch.where(zero_std, torch.zeros_like(rewards), scaled)  # [N]
    return adv, zero_std


def turn_rewards(traj, reward_cfg, total: float) -> list[float]:
    """r_t of each turn (module docstring): the step's penalties, and on the last turn the rest of `total`."""
    rewards = [-reward_cfg.invalid_penalty * (t.action_kind == "invalid") - reward_cfg.repeat_penalty * t.repeated
               for t in traj.turns]
    if rewards:
        rewards[-1] += total - sum(rewards)
    return rewards


def anchor_states(turns, anchor: str = "env_state") -> list[str | None]:
    """What makes two turns "the same state" (module docstring), for each turn; None for the start state.

    env_state: the observation of the last environment action before the turn (invalid actions and harness
    calls leave the state as it was). observation: the observation text the turn was shown, whatever the
    previous turn was (GiGPO's anchor: a rejection message or a harness view is a state of its own).
    """
    if anchor not in STEP_ANCHORS:
        raise ValueError(f"anchor={anchor!r}; expected one of {STEP_ANCHORS}")
    states, state = [], None
    for turn in turns:
        states.append(state)
        if anchor == "observation" or turn.action_kind == "env":
            state = turn.observation
    return states


def discounted_returns(rewards: list[float], gamma: float) -> list[float]:
    """G_t = r_t + gamma * G_{t+1}, G after the last turn = 0."""
    returns, g = [0.0] * len(rewards), 0.0
    for t in range(len(rewards) - 1, -1, -1):
        g = rewards[t] + gamma * g
        returns[t] = g
    return returns


# ------------------------------------------------------------------------- policy loss


def policy_loss(
    logp: torch.Tensor,  # [B, L] current policy logprob of each token
    old_logp: torch.Tensor,  # [B, L] behaviour (sampling) logprob of each token
    adv: torch.Tensor,  # [B] advantage of each sequence
    mask: torch.Tensor,  # [B, L] 1 on policy-generated (loss) tokens, 0 elsewhere
    clip_eps: float = 0.2,
    ref_logp: torch.Tensor | None = None,  # [B, L] reference policy logprob (None: no KL term)
    kl_coef: float = 0.0,
    entropy: torch.Tensor | None = None,  # [B, L] entropy of the current policy at each position
    entropy_coef: float = 0.0,
    agg: str = "token_mean",
    denom: float | None = None,
    traj_tokens: torch.Tensor | None = None,  # [B] agg="traj_mean": loss tokens of each row's whole trajectory
    kl_clamp: bool = True,
    behaviour_logp: torch.Tensor | None = None,  # [B, L] the sampler's logprobs when old_logp is the proximal policy's
    is_cap: float = 2.0,  # truncation of the importance weight (behaviour_logp given)
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO-clip loss with k3 KL to the reference and an entropy bonus (see module docstring).

    Masked positions never contribute a value or a gradient: log-ratios are zeroed there
    before `exp`, so garbage logprobs on padding cannot produce inf/NaN gradients.
    `denom` overrides the normaliser (see module docstring); None: this batch's own count.
    `kl_clamp` bounds the k3 term (module docstring); `behaviour_logp` turns on the off-policy correction.
    Returns (scalar loss, stats) with stats averaged over loss tokens (`ratio_max`: their largest ratio,
    `kl_ref_max`: their largest unclamped k3).
    """
    loss, stats = policy_loss_tensors(logp, old_logp, adv, mask, clip_eps, ref_logp, kl_coef, entropy, entropy_coef,
                                      agg, denom, traj_tokens, kl_clamp, behaviour_logp, is_cap)
    return loss, {k: float(v) for k, v in stats.items()}


def policy_loss_tensors(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    adv: torch.Tensor,
    mask: torch.Tensor,
    clip_eps: float = 0.2,
    ref_logp: torch.Tensor | None = None,
    kl_coef: float = 0.0,
    entropy: torch.Tensor | None = None,
    entropy_coef: float = 0.0,
    agg: str = "token_mean",
    denom: float | None = None,
    traj_tokens: torch.Tensor | None = None,
    kl_clamp: bool = True,
    behaviour_logp: torch.Tensor | None = None,
    is_cap: float = 2.0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """`policy_loss` with its statistics left as 0-d tensors on the loss's device: the trainer sums them over
    micro-batches and copies them to the host once per optimizer step instead of once per statistic."""
    if agg not in LOSS_AGGREGATIONS:
        raise ValueError(f"agg={agg!r}; expected one of {LOSS_AGGREGATIONS}")
    if not (logp.shape == old_logp.shape == mask.shape) or adv.shape != logp.shape[:1]:
        raise ValueError(
            f"shape mismatch: logp {tuple(logp.shape)}, old_logp {tuple(old_logp.shape)}, "
            f"mask {tuple(mask.shape)} must be [B, L] and adv {tuple(adv.shape)} must be [B]"
        )
    if behaviour_logp is not None and behaviour_logp.shape != logp.shape:
        raise ValueError(f"shape mismatch: behaviour_logp {tuple(behaviour_logp.shape)} must be logp's {tuple(logp.shape)}")
    if agg == "traj_mean" and (traj_tokens is None or traj_tokens.shape != adv.shape):
        raise ValueError(f"agg='traj_mean' needs traj_tokens [B] (loss tokens of each row's trajectory), got "
                         f"{None if traj_tokens is None else tuple(traj_tokens.shape)}")
    mask = mask.bool()
    zeros = torch.zeros_like(logp)
    log_ratio = torch.where(mask, logp - old_logp, zeros)  # [B, L]
    ratio = torch.exp(log_ratio)  # [B, L]
    pg_loss1 = -adv[:, None] * ratio  # [B, L]
    pg_loss2 = -adv[:, None] * torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps)  # [B, L]
    token_loss = torch.maximum(pg_loss1, pg_loss2)  # [B, L]
    is_weight = is_raw = None
    if behaviour_logp is not None:
        with torch.no_grad():
            is_raw = torch.exp(torch.where(mask, old_logp - behaviour_logp, zeros))  # [B, L], 1 off-mask
            is_weight = is_raw.clamp(max=is_cap)
        token_loss = is_weight * token_loss
    kl = kl_max = zeros
    if ref_logp is not None:
        ref_log_ratio = torch.where(mask, ref_logp - logp, zeros)  # [B, L]
        with torch.no_grad():  # float64: the unclamped k3 stays finite up to a log-ratio of ~700
            wide = ref_log_ratio.double()
            kl_max = torch.exp(wide) - wide - 1.0  # [B, L] unclamped k3, for the statistic only
        if kl_clamp:
            ref_log_ratio = ref_log_ratio.clamp(-KL_LOG_RATIO_BOUND, KL_LOG_RATIO_BOUND)
        kl = torch.exp(ref_log_ratio) - ref_log_ratio - 1.0  # [B, L] k3 >= 0
        if kl_clamp:
            kl = kl.clamp(max=KL_K3_MAX)
        token_loss = token_loss + kl_coef * kl
    if entropy is not None:
        token_loss = token_loss - entropy_coef * entropy
    token_loss = torch.where(mask, token_loss, zeros)  # [B, L]
    loss = _aggregate(token_loss, mask, agg, denom, traj_tokens)

    with torch.no_grad():
        n = mask.sum().clamp(min=1)
        zero = zeros.sum()
        stats = {
            "clip_frac": ((pg_loss2 > pg_loss1) & mask).sum() / n,
            "approx_kl": torch.where(mask, ratio - 1.0 - log_ratio, zeros).sum() / n,  # k3 of KL(old || new)
            "kl_ref": torch.where(mask, kl, zeros).sum() / n,
            "kl_ref_max": (torch.where(mask, kl_max, kl_max.new_zeros(())).max().to(logp.dtype) if mask.numel()
                           else zero),  # the largest unclamped k3 (0 when no loss token or no reference)
            "entropy": torch.where(mask, entropy, zeros).sum() / n if entropy is not None else zero,
            "ratio_mean": torch.where(mask, ratio, zeros).sum() / n,
            "ratio_max": torch.where(mask, ratio, zeros).max() if mask.numel() else zero,  # 0 when no loss token
            "tokens": mask.sum().to(logp.dtype),
        }
        if is_weight is not None:
            stats["is_weight_mean"] = torch.where(mask, is_weight, zeros).sum() / n
            stats["is_weight_max"] = torch.where(mask, is_raw, zeros).max() if mask.numel() else zero
            stats["is_clip_frac"] = ((is_raw > is_cap) & mask).sum() / n
    return loss, stats


def _aggregate(token_loss: torch.Tensor, mask: torch.Tensor, agg: str, denom: float | None,
               traj_tokens: torch.Tensor | None = None) -> torch.Tensor:
    """token_loss [B, L] (0 off-mask), mask [B, L], traj_tokens [B] (traj_mean) -> scalar."""
    if agg == "token_mean":
        return token_loss.sum() / (denom if denom is not None else mask.sum().clamp(min=1))
    if agg == "traj_mean":
        share = traj_tokens.to(token_loss.dtype).clamp(min=1)  # [B]
        per_row = token_loss.sum(dim=1) / share  # [B] this row's part of its trajectory's mean
        # Default normaliser: the trajectories present, counting a trajectory whose rows are only partly here by
        # the share of its loss tokens that are (whole trajectories count 1).
        return per_row.sum() / (denom if denom is not None else (mask.sum(dim=1) / share).sum().clamp(min=1e-12))
    per_seq_tokens = mask.sum(dim=1)  # [B]
    per_seq = token_loss.sum(dim=1) / per_seq_tokens.clamp(min=1)  # [B]
    return per_seq.sum() / (denom if denom is not None else (per_seq_tokens > 0).sum().clamp(min=1))
