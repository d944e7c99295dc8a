"""Samples, batch plans, padding and the logprobs of left-padded micro-batches."""

from __future__ import annotations

import random

import pytest
import torch

from evoharness_rl.config import ConfigError, GRPOConfig
from evoharness_rl.grpo import batch as B
from evoharness_rl.grpo.policy import token_logprobs
from evoharness_rl.grpo.sampler import TaskSampler
from evoharness_rl.rollout.trajectory import Trajectory, Turn


def _turn(i, prompt, completion):
    return Turn(index=i, messages=[], response="", action_kind="env", action="", prompt_ids=prompt,
                completion_ids=completion, logprobs=[-0.5] * len(completion))


def test_plan_describes_derived_sizes():
    plan = B.make_plan(GRPOConfig(prompts_per_update=16, group_size=8, mini_batch_trajectories=32), world_size=4)
    assert (plan.trajectories_per_update, plan.prompts_per_process, plan.mini_batches,
            plan.mini_batch_trajectories_per_process, plan.optimizer_steps_per_update) == (128, 4, 4, 8, 4)
    assert "128 trajectories per update" in plan.describe()


@pytest.mark.parametrize("kwargs, world, message", [
    (dict(prompts_per_update=16), 3, r"prompts_per_update=16 does not divide across 3 processes \(16 / 3 = 5.33\)"),
    (dict(prompts_per_update=4, group_size=3, mini_batch_trajectories=5), 1,
     r"4 x 3 = 12 trajectories .*12 / 5 = 2.40"),
    (dict(prompts_per_update=4, group_size=4, mini_batch_trajectories=2), 4,
     r"mini_batch_trajectories=2 does not divide across 4"),
])
def test_plan_rejects_sizes_that_do_not_divide(kwargs, world, message):
    with pytest.raises(ConfigError, match=message):
        B.make_plan(GRPOConfig(**kwargs), world)


def test_per_turn_samples_carry_the_trajectory_advantage():
    traj = Trajectory(task_id="t", family="f", env="e", turns=[_turn(0, [1, 2, 3], [4, 5]), _turn(1, [1, 2], [6])])
    rows = B.samples_from_trajectory(traj, advantage=0.7, index=3)
    assert [r.input_ids for r in rows] == [[1, 2, 3, 4, 5], [1, 2, 6]]
    assert [r.loss_mask for r in rows] == [[0, 0, 0, 1, 1], [0, 0, 1]]
    assert rows[0].old_logprobs == [0.0, 0.0, 0.0, -0.5, -0.5]
    assert {r.advantage for r in rows} == {0.7} and {r.trajectory for r in rows} == {3}


def test_accumulated_sample_masks_environment_tokens():
    traj = Trajectory(task_id="t", family="f", env="e", context="accumulated", sequence_ids=[1, 2, 3, 4, 5, 6],
                      loss_mask=[0, 0, 1, 1, 0, 1], sequence_logprobs=[0.0, 0.0, -1.0, -2.0, 0.0, -3.0])
    (row,) = B.samples_from_trajectory(traj, -1.0, 0)
    assert row.loss_mask == [0, 0, 1, 1, 0, 1] and row.loss_tokens == 3
    traj.loss_mask = traj.loss_mask[:-1]
    with pytest.raises(ValueError, match="same length"):
        B.samples_from_trajectory(traj, -1.0, 0)


def test_turn_without_prompt_ids_names_the_fix():
    traj = Trajectory(task_id="t", family="f", env="e", turns=[_turn(0, [], [4])])
    with pytest.raises(ValueError, match="token backend"):
        B.samples_from_trajectory(traj, 1.0, 0)


def test_collate_left_pads_and_keeps_the_loss_tail():
    rows = [B.Sample([1, 2, 3, 4, 5], [0, 0, 0, 1, 1], [0, 0, 0, -1.0, -2.0], 1.0, 0),
            B.Sample([7, 8, 9], [0, 1, 0], [0, -3.0, 0], -1.0, 1)]
    mb = B.collate(rows, pad_id=0)
    assert mb.input_ids.tolist() == [[1, 2, 3, 4, 5], [0, 0, 7, 8, 9]]
    assert mb.position_ids.tolist() == [[0, 1, 2, 3, 4], [0, 0, 0, 1, 2]]
    # K = max(5 - 3, 3 - 1) = 2: the last two tokens of every row
    assert mb.targets.tolist() == [[4, 5], [8, 9]]
    assert mb.loss_mask.tolist() == [[1, 1], [1, 0]]
    assert mb.old_logp.tolist() == [[-1.0, -2.0], [-3.0, 0.0]]


def test_mini_batches_split_trajectories_evenly_and_keep_their_samples_together():
    plan = B.make_plan(GRPOConfig(prompts_per_update=2, group_size=4, mini_batch_trajectories=4), 1)
    samples = [B.Sample([1, 2], [0, 1], [0, 0], 1.0, t) for t in range(8) for _ in range(t % 3 + 1)]
    groups = B.mini_batches(samples, list(range(8)), plan, random.Random(0))
    assert len(groups) == 2
    trajs = [{s.trajectory for s in g} for g in groups]
    assert [len(t) for t in trajs] == [4, 4] and not trajs[0] & trajs[1]
    assert sum(len(g) for g in groups) == len(samples)
    assert all(len(chunk) <= 3 for chunk in B.micro_batches(groups[0], 3))


def test_rows_of_a_trajectory_carry_its_loss_tokens():
    from evoharness_rl.rollout.trajectory import Trajectory, Turn
    turns = [Turn(index=i, messages=[], response="", action_kind="env", action="look", prompt_ids=[1, 2],
                  completion_ids=[3] * (i + 1), logprobs=[-0.1] * (i + 1)) for i in range(3)]
    rows = B.samples_from_trajectory(Trajectory(task_id="t", family="f", env="fake", turns=turns), 0.5, 0)
    assert [r.loss_tokens for r in rows] == [1, 2, 3] and [r.traj_tokens for r in rows] == [6, 6, 6]
    assert B.collate(rows, 0).traj_tokens.tolist() == [6.0, 6.0, 6.0]


def test_task_sampler_is_seeded_and_resumable():
    ids = [f"t{i}" for i in range(5)]
    a = TaskSampler(ids, seed=1)
    first = a.next(3) + a.next(4)  # crosses into the second pass
    assert sorted(first[:5]) == sorted(ids)
    b = TaskSampler(ids, seed=1)
    b.next(3)
    c = TaskSampler(ids, seed=1)
    c.load_state_dict(b.state_dict())
    assert c.next(4) == first[3:]
    with pytest.raises(ValueError, match="same data and seed"):
        TaskSampler(ids, seed=2).load_state_dict(b.state_dict())


def test_micro_batch_logprobs_match_unpadded_forward(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    g = torch.Generator().manual_seed(0)
    rows = []
    for n_prompt, n_completion in ((7, 3), (4, 5), (11, 1)):
        ids = torch.randint(5, 300, (n_prompt + n_completion,), generator=g).tolist()
        rows.append(B.Sample(ids, [0] * n_prompt + [1] * n_completion, [0.0] * len(ids), 1.0, 0))
    mb = B.collate(rows, pad_id=3)
    with torch.no_grad():
        logp, entropy = token_logprobs(model, mb, "detached")  # [B, K]
        for r, s in enumerate(rows):
            full = torch.log_softmax(model(torch.tensor([s.input_ids])).logits[0].float(), -1)  # [L, V]
            expected = full[:-1].gather(-1, torch.tensor(s.input_ids[1:])[:, None]).squeeze(-1)  # [L-1]
            n = s.loss_tokens
            torch.testing.assert_close(logp[r, -n:], expected[-n:], atol=1e-4, rtol=1e-4)
            ent = -(full.exp() * full).sum(-1)[:-1]
            torch.testing.assert_close(entropy[r, -n:], ent[-n:], atol=1e-4, rtol=1e-4)
    assert mb.loss_mask.sum() == 9


def _mixed_samples(n: int, seed: int = 0) -> list:
    """Per-turn rows (prompt + completion) and an accumulated one (loss tokens between environment tokens)."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for i in range(n):
        n_prompt = int(torch.randint(3, 40, (1,), generator=g))
        n_completion = int(torch.randint(1, 9, (1,), generator=g))
        ids = torch.randint(5, 300, (n_prompt + n_completion,), generator=g).tolist()
        old = (-torch.rand(n_completion, generator=g)).tolist()
        rows.append(B.Sample(ids, [0] * n_prompt + [1] * n_completion, [0.0] * n_prompt + old, 1.0 - i % 2, i))
    ids = torch.randint(5, 300, (30,), generator=g).tolist()
    mask = [0] * 8 + [1] * 4 + [0] * 10 + [1] * 5 + [0, 0, 1]
    rows.append(B.Sample(ids, mask, [-0.5 * m for m in mask], -1.0, n))
    return rows


def test_pack_lays_samples_end_to_end_with_their_own_positions():
    rows = [B.Sample([1, 2, 3, 4, 5], [0, 0, 0, 1, 1], [0, 0, 0, -1.0, -2.0], 1.0, 0),
            B.Sample([7, 8, 9], [0, 1, 0], [0, -3.0, 0], -1.0, 1),
            B.Sample([6, 6], [0, 1], [0, -4.0], 0.5, 2)]
    mb = B.pack(rows, pad_id=0)
    assert mb.input_ids.tolist() == [[1, 2, 3, 4, 5], [7, 8, 9, 6, 6]]  # width 5: the two short ones share a row
    assert mb.position_ids.tolist() == [[0, 1, 2, 3, 4], [0, 1, 2, 0, 1]]
    assert mb.attention_mask is None and mb.tokens == 10
    padded = B.collate(rows, pad_id=0)
    for name in ("loss_mask", "old_logp", "adv"):
        assert torch.equal(getattr(mb, name), getattr(padded, name))
    assert mb.keep_positions.tolist() == [2, 3, 5, 8]  # row 0: 2, 3 predict 4, 5; row 1 (from 5): 5 predicts 8, 8 predicts 6
    assert mb.gather.tolist() == [[0, 1], [2, 0], [0, 3]]  # K = 2, right-aligned; the other zeros are masked slots
    assert B.pack(rows + [B.Sample([1, 2, 3, 4], [0, 1, 1, 1], [0.0] * 4, 0.0, 3)], 0).input_ids.shape == (3, 5)


def test_packed_logprobs_equal_the_padded_ones(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    from evoharness_rl.grpo.policy import layout_works

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    assert layout_works(model, "packed")
    rows = _mixed_samples(9)
    packed, padded = B.pack(rows, pad_id=3), B.collate(rows, pad_id=3)
    assert packed.input_ids.numel() < padded.input_ids.numel()  # less padding computed
    mask = padded.loss_mask.bool()
    with torch.no_grad():
        for temperature in (1.0, 0.7):
            lp_packed, ent_packed = token_logprobs(model, packed, "detached", temperature)
            lp_padded, ent_padded = token_logprobs(model, padded, "detached", temperature)
            assert (lp_packed[mask] - lp_padded[mask]).abs().max() <= 1e-5
            assert (ent_packed[mask] - ent_padded[mask]).abs().max() <= 1e-5


def _turns_of_tasks(tasks: int, turns: int, seed: int = 0) -> list:
    """Per-turn rows as a rollout makes them: one system prompt, then each task's objective, then the turn's own
    observation and completion; and one long row of another kind (an accumulated one), which sets the row width."""
    g = torch.Generator().manual_seed(seed)
    system = torch.randint(5, 300, (40,), generator=g).tolist()
    rows = []
    for task in range(tasks):
        objective = torch.randint(5, 300, (20,), generator=g).tolist()
        for turn in range(turns):
            own = torch.randint(5, 300, (int(torch.randint(2, 10, (1,), generator=g)),), generator=g).tolist()
            n_completion = int(torch.randint(1, 4, (1,), generator=g))
            ids = system + objective + own + torch.randint(5, 300, (n_completion,), generator=g).tolist()
            mask = [0] * (len(ids) - n_completion) + [1] * n_completion
            old = [-0.1 * m for m in mask]
            rows.append(B.Sample(ids, mask, old, 1.0 - task % 2, task * turns + turn))
    ids = torch.randint(5, 300, (110,), generator=g).tolist()
    rows.append(B.Sample(ids, [0] * 100 + [1] * 10, [0.0] * 100 + [-0.2] * 10, 0.5, tasks * turns))
    return rows


def test_shared_layout_lays_a_common_prefix_out_once():
    shared = list(range(100, 110))
    rows = [B.Sample(shared + [1, 2, 3], [0] * 11 + [1, 1], [0.0] * 11 + [-1.0, -2.0], 1.0, 0),
            B.Sample(shared + [4, 5], [0] * 11 + [1], [0.0] * 11 + [-3.0], -1.0, 1),
            B.Sample([7, 8, 9], [0, 1, 0], [0, -4.0, 0], 0.5, 2),
            B.Sample(list(range(100, 121)), [0] * 20 + [1], [0.0] * 20 + [-5.0], 0.0, 3)]
    mb = B.pack(rows, pad_id=0, share_prefixes=True)
    # Width 21 (the longest sample, alone in row 0). Row 1: the 10 shared tokens once, the two suffixes with
    # positions going on from 10, then sample 2 in a segment of its own, then 3 padding positions.
    assert mb.input_ids.tolist()[1] == shared + [1, 2, 3, 4, 5, 7, 8, 9, 0, 0, 0]
    assert mb.position_ids.tolist()[1] == list(range(13)) + [10, 11, 0, 1, 2, 0, 1, 2]
    assert mb.tokens == 21 + 18  # each token the model reads, the shared ones once
    mask = mb.attention_mask[1, 0]
    assert mb.attention_mask.shape == (2, 1, 21, 21) and mask.dtype == torch.bool
    assert mask[13].nonzero().flatten().tolist() == list(range(10)) + [13]  # sample 1's first suffix token
    assert mask[12].nonzero().flatten().tolist() == list(range(13))  # sample 0: its prefix, then causal
    assert mask[17].nonzero().flatten().tolist() == [15, 16, 17]  # sample 2 sees itself only
    assert mask[19].nonzero().flatten().tolist() == [19]  # a padding position: itself (no empty softmax row)
    assert mb.attention_mask[0, 0].equal(torch.ones(21, 21, dtype=torch.bool).tril())  # row 0: plain causal
    # Every loss token is predicted from its own suffix: 0's two tokens by 10 + 21 and 11 + 21, 1's by 13 + 21.
    assert [int(mb.keep_positions[mb.gather[i, j]]) for i, j in ((0, 0), (0, 1), (1, 1))] == [31, 32, 34]
    padded = B.collate(rows, pad_id=0)
    for name in ("loss_mask", "old_logp", "adv"):
        assert torch.equal(getattr(mb, name), getattr(padded, name))


def test_prefixes_shared_only_when_they_save_tokens():
    rows = _turns_of_tasks(tasks=3, turns=4)
    units = B._prefix_units(rows, max(len(s.input_ids) for s in rows))
    for P, members in units:
        if len(members) > 1:  # every unit's prefix is common to its members and ends before their first loss token
            assert P >= B.MIN_SHARED_PREFIX
            assert all(rows[m].input_ids[:P] == rows[members[0]].input_ids[:P] for m in members)
            assert all(rows[m].loss_mask.index(1) > P for m in members)
    assert sorted(m for _, members in units for m in members) == list(range(len(rows)))
    saved = sum(P * (len(members) - 1) for P, members in units)
    assert saved > 0 and B.pack(rows, 0, share_prefixes=True).tokens == sum(len(s.input_ids) for s in rows) - saved
    # No two samples open alike: nothing shared, the packed layout exactly.
    alone = _mixed_samples(9)
    assert all(len(members) == 1 for _, members in B._prefix_units(alone, 50))
    assert B.pack(alone, 0, share_prefixes=True).attention_mask is None


def test_the_layout_check_takes_the_shared_path():
    from evoharness_rl.grpo.policy import layout_check_samples

    samples = layout_check_samples()
    assert B.pack(samples, 0, share_prefixes=True).attention_mask is not None  # the check exercises the block mask
    assert B.pack(samples, 0).position_ids[1].tolist() != list(range(32))  # ... and packed rows shared by samples


def test_prefixes_too_short_to_pay_for_the_mask_are_not_shared():
    # Per-turn rows that share only 9 tokens of ~40: a unit saves too few rows for the block mask.
    rows = [B.Sample(list(range(100, 109)) + [300 + i] * 30, [0] * 37 + [1, 1], [0.0] * 39, 0.0, i) for i in range(6)]
    assert B.pack(rows, 0, share_prefixes=True).attention_mask is None
    assert [len(c) for c in B.micro_batches(rows, 4, "shared")] == [4, 2]


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_shared_logprobs_and_gradients_equal_the_padded_ones(tiny_model_dir, attention):
    from transformers import AutoModelForCausalLM

    from evoharness_rl.grpo.policy import layout_works

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32, attn_implementation=attention)
    assert layout_works(model, "shared")
    rows = _turns_of_tasks(tasks=3, turns=4) + _mixed_samples(3)
    shared, padded = B.pack(rows, 0, share_prefixes=True), B.collate(rows, 0)
    assert shared.attention_mask is not None
    mask = padded.loss_mask.bool()
    grads = []
    for batch in (shared, padded):
        model.zero_grad()
        lp, ent = token_logprobs(model, batch, "detached", 0.7)
        (lp * mask).sum().backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
        if batch is shared:
            lp_shared, ent_shared = lp.detach(), ent
    assert (lp_shared[mask] - lp.detach()[mask]).abs().max() <= 1e-5
    assert (ent_shared[mask] - ent[mask]).abs().max() <= 1e-5
    torch.testing.assert_close(grads[0], grads[1], atol=1e-5, rtol=1e-4)


def test_layout_falls_back_to_what_the_model_supports(monkeypatch):
    from types import SimpleNamespace

    from evoharness_rl.grpo import trainer

    supported = {"padded"}
    monkeypatch.setattr(trainer, "layout_works", lambda model, shape: shape in supported)
    run = SimpleNamespace(model=None, cfg=SimpleNamespace(grpo=GRPOConfig()))
    assert trainer.layout(run) == "padded"  # neither packed layout works: padded rows
    supported.add("packed")
    assert trainer.layout(run) == "packed"  # no 4D masks (flash attention): packed without sharing
    supported.add("shared")
    assert trainer.layout(run) == "shared"
    run.cfg.grpo.share_prefixes = False
    assert trainer.layout(run) == "packed"
    run.cfg.grpo.pack_samples = False
    assert trainer.layout(run) == "padded"
