"""The GRPO core against values computed by hand (arithmetic in the comments)."""

from __future__ import annotations

import math

import pytest
import torch

from evoharness_rl.config import RewardConfig
from evoharness_rl.grpo import core
from evoharness_rl.rollout.trajectory import Trajectory

E = math.e


def test_horizon_curriculum_phases():
    budgets = [core.horizon(u, 300, [8, 10, 15], 70) for u in (0, 99, 100, 199, 200, 299, 400)]
    assert budgets == [8, 8, 10, 10, 15, 15, 15]
    assert core.horizon(5, 300, [], 70) == 70


def test_group_advantages_by_hand():
    rewards = torch.tensor([1.0, 2.0, 3.0, 5.0, 5.0, 7.0], dtype=torch.float64)
    groups = torch.tensor([0, 0, 0, 1, 1, 2])
    adv, zero = core.group_advantages(rewards, groups, eps=1e-6)
    # group 0: mean 2, sample std sqrt(((-1)^2 + 0 + 1^2) / (3 - 1)) = 1 -> (-1, 0, 1) / (1 + 1e-6)
    # group 1: std 0 -> advantages 0 (flagged); group 2: one member -> 0 (flagged)
    expected = torch.tensor([-1 / (1 + 1e-6), 0.0, 1 / (1 + 1e-6), 0.0, 0.0, 0.0], dtype=torch.float64)
    torch.testing.assert_close(adv, expected)
    assert zero.tolist() == [False, False, False, True, True, True]


def test_group_advantages_ignore_group_order_and_ids():
    rewards = torch.tensor([0.0, 10.0, 4.0, 4.0, 8.0])
    adv, zero = core.group_advantages(rewards, torch.tensor([7, 3, 7, 3, 7]))
    # group 7: (0, 4, 8): mean 4, sample std 4 -> (-1, 0, 1); group 3: (10, 4): mean 7, std sqrt(18) = 4.2426
    expected = torch.tensor([-1.0, 3 / math.sqrt(18), 0.0, -3 / math.sqrt(18), 1.0])
    torch.testing.assert_close(adv, expected, atol=1e-5, rtol=1e-5)
    assert not zero.any()


def test_group_advantages_batch_and_no_scaling_by_hand():
    # Group 0 succeeds once (10 vs 0); group 1 differs only by a penalty (-0.1 vs -0.3).
    rewards = torch.tensor([10.0, 0.0, -0.1, -0.3], dtype=torch.float64)
    groups = torch.tensor([0, 0, 1, 1])
    by_group, _ = core.group_advantages(rewards, groups, eps=0.0)
    # group scaling blows the penalty-only group up to the success group's size: +-0.7071 both
    torch.testing.assert_close(by_group, torch.tensor([1, -1, 1, -1], dtype=torch.float64) / math.sqrt(2))
    # batch: mean 2.4, squares 57.76 + 5.76 + 6.25 + 7.29 = 77.06, sample std sqrt(77.06 / 3) = 5.0682
    by_batch, zero = core.group_advantages(rewards, groups, eps=0.0, scale="batch")
    std_b = math.sqrt(77.06 / 3)
    torch.testing.assert_close(by_batch, torch.tensor([5.0, -5.0, 0.1, -0.1], dtype=torch.float64) / std_b)
    assert not zero.any()
    # a given batch std (other processes' rewards) is used as is
    given, _ = core.group_advantages(rewards, groups, eps=0.0, scale="batch", batch_std=2.0)
    torch.testing.assert_close(given, torch.tensor([2.5, -2.5, 0.05, -0.05], dtype=torch.float64))
    # none (Dr. GRPO): centred rewards in reward units
    raw, _ = core.group_advantages(rewards, groups, eps=0.0, scale="none")
    torch.testing.assert_close(raw, torch.tensor([5.0, -5.0, 0.1, -0.1], dtype=torch.float64))


def test_group_advantages_zero_variance_groups_are_zero_at_every_scale():
    rewards = torch.tensor([3.0, 3.0, 1.0, 2.0])
    for scale in core.ADVANTAGE_SCALES:
        adv, zero = core.group_advantages(rewards, torch.tensor([0, 0, 1, 1]), scale=scale)
        assert adv[:2].tolist() == [0.0, 0.0] and zero.tolist() == [True, True, False, False]
        assert adv[2] < 0 < adv[3]
    with pytest.raises(ValueError, match="scale='std'"):
        core.group_advantages(rewards, torch.tensor([0, 0, 1, 1]), scale="std")


def _hand_batch():
    # Row 0 (adv +1): log-ratios (1, 0, masked) -> ratio (e, 1); row 1 (adv -1): ratios (1.1, 0.5, 1).
    logp = torch.tensor([[1.0, 0.0, 123.0], [math.log(1.1), math.log(0.5), 0.0]], dtype=torch.float64)
    old = torch.zeros(2, 3, dtype=torch.float64)
    adv = torch.tensor([1.0, -1.0], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    return logp, old, adv, mask


def test_policy_loss_clipping_by_hand():
    logp, old, adv, mask = _hand_batch()
    loss, stats = core.policy_loss(logp, old, adv, mask, clip_eps=0.2)
    # row 0: pg1 = -ratio = (-e, -1); pg2 = -clip(ratio) = (-1.2, -1); max = (-1.2, -1); token 0 clipped
    # row 1: pg1 = ratio = (1.1, 0.5, 1); pg2 = (1.1, 0.8, 1); max = (1.1, 0.8, 1); token 1 clipped
    # token_mean = (-1.2 - 1 + 1.1 + 0.8 + 1) / 5 = 0.7 / 5 = 0.14
    assert loss.item() == pytest.approx(0.14)
    assert stats["clip_frac"] == pytest.approx(2 / 5)
    assert stats["ratio_mean"] == pytest.approx((E + 1 + 1.1 + 0.5 + 1) / 5)
    # approx_kl = mean(ratio - 1 - log ratio) = ((e - 2) + 0 + (0.1 - ln 1.1) + (-0.5 - ln 0.5) + 0) / 5
    assert stats["approx_kl"] == pytest.approx(((E - 2) + (0.1 - math.log(1.1)) + (-0.5 - math.log(0.5))) / 5)
    seq_loss, _ = core.policy_loss(logp, old, adv, mask, clip_eps=0.2, agg="seq_mean")
    # seq_mean = ((-1.2 - 1) / 2 + (1.1 + 0.8 + 1) / 3) / 2 = (-1.1 + 0.966667) / 2 = -0.0666667
    assert seq_loss.item() == pytest.approx((-1.1 + 2.9 / 3) / 2)
    # traj_mean with both rows turns of one trajectory of 2 + 3 = 5 loss tokens: (-2.2 + 2.9) / 5 / 1 = 0.14,
    # the token mean (one trajectory). As turns of two trajectories of 5 and 10 loss tokens, the rest of them in
    # other micro-batches: with denom 2 (the mini-batch's trajectories), (-2.2 / 5 + 2.9 / 10) / 2 = -0.075; without
    # a denom, the trajectories count by the share of their tokens present, 2 / 5 + 3 / 10 = 0.7: -0.15 / 0.7
    one, _ = core.policy_loss(logp, old, adv, mask, clip_eps=0.2, agg="traj_mean",
                              traj_tokens=torch.tensor([5.0, 5.0]))
    assert one.item() == pytest.approx(0.14)
    tokens = torch.tensor([5.0, 10.0])
    two, _ = core.policy_loss(logp, old, adv, mask, clip_eps=0.2, agg="traj_mean", traj_tokens=tokens, denom=2.0)
    assert two.item() == pytest.approx(-0.075)
    part, _ = core.policy_loss(logp, old, adv, mask, clip_eps=0.2, agg="traj_mean", traj_tokens=tokens)
    assert part.item() == pytest.approx(-0.15 / 0.7)


def test_off_policy_correction_by_hand():
    logp, prox, adv, mask = _hand_batch()  # the proximal logprobs are 0 everywhere: the ratios of the test above
    # Behaviour logprobs: row 0 (0, ln 4, masked) -> weights exp(0 - 0) = 1 and exp(-ln 4) = 0.25;
    # row 1 (ln 0.5, -ln 3, 0) -> weights 2, 3 (capped at 2) and 1.
    behaviour = torch.tensor([[0.0, math.log(4.0), -50.0], [math.log(0.5), -math.log(3.0), 0.0]], dtype=torch.float64)
    loss, stats = core.policy_loss(logp, prox, adv, mask, clip_eps=0.2, behaviour_logp=behaviour, is_cap=2.0)
    # clipped token losses (test above): row 0 (-1.2, -1), row 1 (1.1, 0.8, 1)
    # weighted: (-1.2 * 1, -1 * 0.25), (1.1 * 2, 0.8 * 2, 1 * 1) -> sum -1.2 - 0.25 + 2.2 + 1.6 + 1 = 3.35; / 5
    assert loss.item() == pytest.approx(3.35 / 5)
    assert stats["is_weight_mean"] == pytest.approx((1 + 0.25 + 2 + 2 + 1) / 5)
    assert stats["is_weight_max"] == pytest.approx(3.0)  # before the cap: the statistic shows how far off it was
    assert stats["is_clip_frac"] == pytest.approx(1 / 5)
    assert stats["clip_frac"] == pytest.approx(2 / 5)  # the clip is against the proximal policy, as without weights
    # The weight carries no gradient: d loss / d logp of row 1 token 0 (ratio 1.1, unclipped, A = -1) = 2 * 1.1 / 5
    logp = logp.clone().requires_grad_(True)
    loss, _ = core.policy_loss(logp, prox, adv, mask, clip_eps=0.2, behaviour_logp=behaviour, is_cap=2.0)
    (grad,) = torch.autograd.grad(loss, logp)
    assert grad[1, 0].item() == pytest.approx(2 * 1.1 / 5)
    assert grad[0, 2].item() == 0.0  # masked: no value, no gradient, even with a behaviour logprob of -50


def test_off_policy_correction_is_the_plain_loss_on_policy():
    logp, old, adv, mask = _hand_batch()
    ref = torch.tensor([[0.5, -0.5, 0.0], [0.2, 0.1, -0.3]], dtype=torch.float64)
    plain, plain_stats = core.policy_loss(logp, old, adv, mask, ref_logp=ref, kl_coef=0.1)
    same, stats = core.policy_loss(logp, old, adv, mask, ref_logp=ref, kl_coef=0.1, behaviour_logp=old.clone())
    assert same.item() == pytest.approx(plain.item(), abs=1e-12)
    assert stats["is_weight_mean"] == 1.0 and stats["is_clip_frac"] == 0.0
    assert "is_weight_mean" not in plain_stats


def test_traj_mean_weighs_trajectories_equally_whatever_their_turn_count():
    # One group: a success in 2 turns (A = +1) and a failure in 6 turns (A = -1), every turn emitting the same
    # token at logprob log 0.5 (the response format, say). Per token at ratio 1, d(pg_loss)/d(logp) = -A.
    # token_mean: (2 * -1 + 6 * +1) / 8 = +0.5 in all: the shared token is pushed down by the long failure.
    # traj_mean: (2 * -1 / 2 + 6 * +1 / 6) / 2 = 0: the group's centred advantages cancel, as they should.
    turns = [1.0] * 2 + [-1.0] * 6
    logp = torch.full((8, 1), math.log(0.5), dtype=torch.float64, requires_grad=True)
    adv, mask = torch.tensor(turns, dtype=torch.float64), torch.ones(8, 1)
    traj_tokens = torch.tensor([2.0] * 2 + [6.0] * 6)
    for agg, shared_grad in (("token_mean", 0.5), ("traj_mean", 0.0)):
        loss, _ = core.policy_loss(logp, logp.detach(), adv, mask, agg=agg, traj_tokens=traj_tokens)
        (grad,) = torch.autograd.grad(loss, logp)
        assert grad.sum().item() == pytest.approx(shared_grad, abs=1e-12)


def test_policy_loss_kl_and_entropy_by_hand():
    logp, old, adv, mask = _hand_batch()
    ref = torch.zeros_like(logp)
    entropy = torch.full_like(logp, 2.0)
    loss, stats = core.policy_loss(logp, old, adv, mask, 0.2, ref_logp=ref, kl_coef=0.1, entropy=entropy,
                                   entropy_coef=0.01)
    # k3 = exp(ref - logp) - (ref - logp) - 1 = exp(-logp) + logp - 1:
    #   row 0: (e^-1 + 1 - 1, 0) = (0.367879, 0)
    #   row 1: (1/1.1 + ln 1.1 - 1, 2 + ln 0.5 - 1, 0) = (0.0044011, 0.3068528, 0)
    kl = [math.exp(-1), 0.0, 1 / 1.1 + math.log(1.1) - 1, 2 + math.log(0.5) - 1, 0.0]
    # loss = (0.7 + 0.1 * sum(kl) - 0.01 * 2 * 5) / 5
    assert loss.item() == pytest.approx((0.7 + 0.1 * sum(kl) - 0.1) / 5)
    assert stats["kl_ref"] == pytest.approx(sum(kl) / 5)
    assert stats["entropy"] == pytest.approx(2.0)


def test_kl_clamp_bounds_k3_by_hand():
    # ref - logp per token: 25, 12, 1, -30 (logp -25, -12, -1, 0 against ref 0, 0, 0, -30)
    logp = torch.tensor([[-25.0, -12.0, -1.0, 0.0]], dtype=torch.float64, requires_grad=True)
    ref = torch.tensor([[0.0, 0.0, 0.0, -30.0]], dtype=torch.float64)
    adv, mask = torch.zeros(1, dtype=torch.float64), torch.ones(1, 4)
    loss, stats = core.policy_loss(logp, logp.detach(), adv, mask, ref_logp=ref, kl_coef=0.5)
    # clamped log-ratio: 20, 12, 1, -20; k3 = e^d - d - 1: e^20 - 21, e^12 - 13 = 162741.8, e - 2, e^-20 + 19
    # k3 clamped to 10: 10, 10, e - 2, 10 -> loss = 0.5 * (30 + e - 2) / 4 (advantage 0: no policy-gradient term)
    assert loss.item() == pytest.approx(0.5 * (30 + E - 2) / 4)
    assert stats["kl_ref"] == pytest.approx((30 + E - 2) / 4)
    assert stats["kl_ref_max"] == pytest.approx(math.exp(25) - 26)  # the unclamped k3 of token 0
    (grad,) = torch.autograd.grad(loss, logp)
    # only token 2 is inside the clamp: d k3 / d logp = 1 - e^(ref - logp) = 1 - e, times 0.5 / 4
    assert grad[0].tolist() == pytest.approx([0.0, 0.0, 0.5 * (1 - E) / 4, 0.0])

    loss, stats = core.policy_loss(logp, logp.detach(), adv, mask, ref_logp=ref, kl_coef=0.5, kl_clamp=False)
    unclamped = [math.exp(25) - 26, math.exp(12) - 13, E - 2, math.exp(-30) + 29]
    assert loss.item() == pytest.approx(0.5 * sum(unclamped) / 4)
    assert stats["kl_ref_max"] == pytest.approx(unclamped[0])


def _loop_policy_loss(logp, old, adv, mask, clip_eps, ref, kl_coef, ent, ent_coef, agg):
    """The same loss, one token at a time, in plain Python."""
    seq_losses, total, n = [], 0.0, 0
    for b in range(len(logp)):
        row, row_n = 0.0, 0
        for t in range(len(logp[b])):
            if not mask[b][t]:
                continue
            ratio = math.exp(logp[b][t] - old[b][t])
            clipped = min(max(ratio, 1 - clip_eps), 1 + clip_eps)
            value = max(-adv[b] * ratio, -adv[b] * clipped)
            d = ref[b][t] - logp[b][t]
            value += kl_coef * (math.exp(d) - d - 1) - ent_coef * ent[b][t]
            row, row_n = row + value, row_n + 1
        total, n = total + row, n + row_n
        if row_n:
            seq_losses.append(row / row_n)
    return total / n if agg == "token_mean" else sum(seq_losses) / len(seq_losses)


@pytest.mark.parametrize("agg", ["token_mean", "seq_mean", "traj_mean"])
def test_vectorised_loss_matches_per_sample_loop(agg):
    g = torch.Generator().manual_seed(0)
    B, L = 5, 9
    logp = -torch.rand(B, L, generator=g, dtype=torch.float64) * 3
    old = logp + (torch.rand(B, L, generator=g, dtype=torch.float64) - 0.5)
    ref = logp + (torch.rand(B, L, generator=g, dtype=torch.float64) - 0.5)
    ent = torch.rand(B, L, generator=g, dtype=torch.float64)
    adv = torch.randn(B, generator=g, dtype=torch.float64)
    mask = (torch.rand(B, L, generator=g) > 0.4).long()
    mask[0] = 0  # a row without loss tokens
    # traj_mean with one trajectory per row is seq_mean (the loop computes that)
    loss, _ = core.policy_loss(logp, old, adv, mask, 0.2, ref, 0.05, ent, 0.01, agg, traj_tokens=mask.sum(1).double())
    expected = _loop_policy_loss(logp.tolist(), old.tolist(), adv.tolist(), mask.tolist(), 0.2, ref.tolist(), 0.05,
                                 ent.tolist(), 0.01, "token_mean" if agg == "token_mean" else "seq_mean")
    assert loss.item() == pytest.approx(expected, rel=1e-12)


def test_micro_batches_with_denom_sum_to_the_full_loss():
    g = torch.Generator().manual_seed(1)
    logp = -torch.rand(6, 7, generator=g, dtype=torch.float64)
    old, adv = logp - 0.1, torch.randn(6, generator=g, dtype=torch.float64)
    mask = (torch.rand(6, 7, generator=g) > 0.3).long()
    traj = torch.tensor([3, 3, 2, 2, 2, 1])  # rows 0-1, 2-4 and 5 are turns of three trajectories
    traj_tokens = torch.stack([mask[traj == t].sum() for t in traj]).double()  # [6]
    for agg, denom in (("token_mean", float(mask.sum())), ("seq_mean", float((mask.sum(1) > 0).sum())),
                       ("traj_mean", 3.0)):
        full, _ = core.policy_loss(logp, old, adv, mask, agg=agg, traj_tokens=traj_tokens)
        parts = [core.policy_loss(logp[s], old[s], adv[s], mask[s], agg=agg, denom=denom, traj_tokens=traj_tokens[s])[0]
                 for s in (slice(0, 2), slice(2, 6))]
        assert sum(p.item() for p in parts) == pytest.approx(full.item(), rel=1e-12)


def test_gradients_flow_only_through_policy_tokens():
    logp, old, adv, mask = _hand_batch()
    logp = logp.clone()
    logp[0, 2] = 1e4  # garbage on a masked position must not reach the loss or the gradient
    logp.requires_grad_(True)
    ent = torch.ones_like(logp, requires_grad=True)
    loss, _ = core.policy_loss(logp, old, adv, mask, 0.2, torch.zeros_like(old), 0.1, ent, 0.01)
    loss.backward()
    assert torch.isfinite(loss)
    assert torch.all(logp.grad[mask == 0] == 0) and torch.all(ent.grad[mask == 0] == 0)
    # unclipped loss tokens get a gradient: row 0 token 1 (ratio 1), row 1 tokens 0 and 2
    assert logp.grad[0, 1] != 0 and logp.grad[1, 0] != 0 and logp.grad[1, 2] != 0
    assert ent.grad[mask == 1].tolist() == pytest.approx([-0.01 / 5] * 5)  # d(-0.01 * H / 5) / dH


def test_policy_loss_rejects_bad_shapes_and_agg():
    logp, old, adv, mask = _hand_batch()
    with pytest.raises(ValueError, match="shape mismatch"):
        core.policy_loss(logp, old[:, :2], adv, mask)
    with pytest.raises(ValueError, match="agg"):
        core.policy_loss(logp, old, adv, mask, agg="sum")
    with pytest.raises(ValueError, match="traj_tokens"):
        core.policy_loss(logp, old, adv, mask, agg="traj_mean")


def _turns(kinds: str, repeats: str = ""):
    """Turns by kind: 'e' env action, 'i' invalid, 'h' harness; `repeats` marks (with 'r') turns repeating the last."""
    from evoharness_rl.rollout.trajectory import Turn

    names = {"e": "env", "i": "invalid", "h": "harness"}
    return [Turn(index=k, messages=[], response="", action_kind=names[c], action="a", repeated=repeats[k:k + 1] == "r")
            for k, c in enumerate(kinds)]


def test_turn_rewards_put_penalties_on_their_steps_and_the_rest_on_the_last():
    cfg = RewardConfig(success_scale=10.0, invalid_penalty=0.1, repeat_penalty=0.2)
    traj = Trajectory(task_id="t", family="f", env="e", turns=_turns("eiie", repeats="..r."))
    # penalties: turn 1 invalid -0.1, turn 2 invalid and repeated -0.1 - 0.2 = -0.3; the last turn takes the rest of
    # the total 9.6: 9.6 - (-0.1 - 0.3) = 10.0
    assert core.turn_rewards(traj, cfg, total=9.6) == pytest.approx([0.0, -0.1, -0.3, 10.0])
    assert sum(core.turn_rewards(traj, cfg, total=9.6)) == pytest.approx(9.6)
    assert core.turn_rewards(Trajectory(task_id="t", family="f", env="e"), cfg, total=1.0) == []


def test_discounted_returns_by_hand():
    # G_2 = 10; G_1 = -0.3 + 0.5 * 10 = 4.7; G_0 = -0.1 + 0.5 * 4.7 = 2.25
    assert core.discounted_returns([-0.1, -0.3, 10.0], 0.5) == pytest.approx([2.25, 4.7, 10.0])
    assert core.discounted_returns([1.0, 2.0], 1.0) == pytest.approx([3.0, 2.0])
    assert core.discounted_returns([], 0.9) == []


def test_anchor_states_follow_environment_actions_only():
    from evoharness_rl.rollout.trajectory import Turn

    steps = [("env", "at desk"), ("invalid", "Nothing happens."), ("harness", "PLAN: ..."), ("env", "took mug")]
    turns = [Turn(index=k, messages=[], response="", action_kind=kind, action="a", observation=obs)
             for k, (kind, obs) in enumerate(steps)]
    assert core.anchor_states(turns) == [None, "at desk", "at desk", "at desk"]


def test_anchor_states_on_the_observation_text():
    from evoharness_rl.rollout.trajectory import Turn

    steps = [("env", "at desk"), ("invalid", "Nothing happens."), ("harness", "PLAN: ..."), ("env", "took mug")]
    turns = [Turn(index=k, messages=[], response="", action_kind=kind, action="a", observation=obs)
             for k, (kind, obs) in enumerate(steps)]
    # each turn acted on what the previous turn returned, whatever its kind (GiGPO)
    assert core.anchor_states(turns, "observation") == [None, "at desk", "Nothing happens.", "PLAN: ..."]
    with pytest.raises(ValueError, match="anchor='prompt'"):
        core.anchor_states(turns, "prompt")


def _tied_group_scored(anchor: str, keep_tied: bool):
    """trainer.score on one tied group of two episodes (the options act there; the arithmetic is in the test)."""
    from types import SimpleNamespace

    from evoharness_rl.config import Config
    from evoharness_rl.grpo.batch import make_plan
    from evoharness_rl.grpo.trainer import score
    from evoharness_rl.rollout.trajectory import Turn

    cfg = Config()
    cfg.reward.invalid_penalty, cfg.reward.repeat_penalty = 0.5, 0.0
    g = cfg.grpo
    g.prompts_per_update, g.group_size, g.mini_batch_trajectories = 1, 2, 2
    g.step_gamma, g.scale_rewards, g.step_advantage_weight = 1.0, "none", 1.0
    g.step_anchor, g.step_keep_tied_groups = anchor, keep_tied
    run = SimpleNamespace(cfg=cfg, accelerator=SimpleNamespace(num_processes=1, process_index=0),
                          plan=make_plan(g, 1))

    def traj(steps):
        turns = [Turn(index=k, messages=[], response="", action_kind=kind, action="a", observation=obs)
                 for k, (kind, obs) in enumerate(steps)]
        return Trajectory(task_id="t", family="f", env="e", turns=turns, rewards={"total": 1.0})

    return score(run, [traj([("env", "at desk"), ("env", "done")]),
                       traj([("invalid", "Nothing happens."), ("env", "at desk"), ("env", "done")])])


def test_step_advantages_of_a_tied_group_by_hand():
    # Both episodes earn 1.0: the group ties, its trajectory advantage is 0.
    # A: turn rewards [0, 1.0] -> returns [1.0, 1.0]; B: [-0.5, 0, 1.5] (the last takes 1.0 + 0.5) -> [1.0, 1.5, 1.5]
    scored = _tied_group_scored("env_state", keep_tied=False)
    assert scored.advantages == [0.0, 0.0] and scored.turn_advantages == {}  # default: a tied group gets none

    scored = _tied_group_scored("env_state", keep_tied=True)
    # env_state anchors: A [start, desk], B [start, start, desk] (the rejected action leaves B at the start)
    # start: returns 1.0 (A0), 1.0 (B0), 1.5 (B1), mean 7/6 -> -1/6, -1/6, +1/3
    # desk: 1.0 (A1), 1.5 (B2), mean 1.25 -> -0.25, +0.25
    assert scored.turn_advantages[0] == pytest.approx([-1 / 6, -0.25])
    assert scored.turn_advantages[1] == pytest.approx([-1 / 6, 1 / 3, 0.25])
    assert scored.anchored_turns == 1.0  # every turn shares its state with another


def test_step_advantages_anchored_on_the_observation_by_hand():
    scored = _tied_group_scored("observation", keep_tied=True)
    # observation anchors: A [start, desk], B [start, "Nothing happens.", desk]
    # start: 1.0 (A0), 1.0 (B0) -> 0, 0; "Nothing happens.": 1.5 (B1) alone -> 0; desk: -0.25, +0.25 as before
    assert scored.turn_advantages[0] == pytest.approx([0.0, -0.25])
    assert scored.turn_advantages[1] == pytest.approx([0.0, 0.0, 0.25])
    assert scored.anchored_turns == pytest.approx(4 / 5)  # B1 is the only turn in its state


def test_the_core_s_choices_are_the_ones_config_validates():
    from evoharness_rl import config

    assert core.LOSS_AGGREGATIONS is config.LOSS_AGGREGATIONS and core.ADVANTAGE_SCALES is config.ADVANTAGE_SCALES
    assert core.STEP_ANCHORS is config.STEP_ANCHORS
    for field, allowed in (("loss_agg", core.LOSS_AGGREGATIONS), ("scale_rewards", core.ADVANTAGE_SCALES),
                           ("step_anchor", core.STEP_ANCHORS)):
        cfg = config.Config()
        setattr(cfg.grpo, field, "bogus")
        with pytest.raises(config.ConfigError, match=f"grpo.{field}='bogus' is not valid; allowed values: "
                                                     f"{', '.join(allowed)}"):
            config.validate(cfg)
