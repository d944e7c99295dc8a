"""The trainer scores rollout tokens exactly as the hf backend sampled them (the PPO ratio starts at 1)."""

from __future__ import annotations

import functools

import pytest
import torch

from evoharness_rl.grpo import batch as B
from evoharness_rl.grpo.policy import token_logprobs


@pytest.mark.parametrize("context, temperature", [("per_turn", 1.0), ("accumulated", 1.0), ("per_turn", 0.7)])
def test_trainer_logprobs_match_hf_sampling_logprobs(tiny_model_dir, context, temperature):
    from tests.fakes.count import make_count_env
    from transformers import AutoModelForCausalLM

    from evoharness_rl.engines.base import SamplingSettings
    from evoharness_rl.engines.hf import HFBackend
    from evoharness_rl.models import load_tokenizer
    from evoharness_rl.rollout.engine import EpisodeJob, RolloutEngine
    from evoharness_rl.rollout.episode import EpisodeSettings
    from evoharness_rl.rollout.pool import EnvPool

    tok = load_tokenizer(str(tiny_model_dir))
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    sampling = SamplingSettings(temperature=temperature, max_new_tokens=12, seed=0)
    with RolloutEngine(EnvPool(functools.partial(make_count_env), 1, 60), HFBackend(model, tok, batch_size=8), tok,
                       sampling, 1024) as engine:
        trajs = engine.run([EpisodeJob("a/2-1", 0, 0)] * 3, EpisodeSettings(max_steps=3, context=context))
    samples = [s for i, t in enumerate(trajs) for s in B.samples_from_trajectory(t, 1.0, i)]
    assert len(samples) == (3 if context == "accumulated" else sum(len(t.turns) for t in trajs))
    mb = B.collate(samples, tok.pad_token_id)
    with torch.no_grad():
        logp, _ = token_logprobs(model, mb, temperature=temperature)  # [B, K]
    mask = mb.loss_mask.bool()
    assert int(mask.sum()) == sum(t.generated_tokens for t in trajs)
    torch.testing.assert_close(logp[mask], mb.old_logp[mask], atol=1e-4, rtol=0)


def test_after_prompt_truncation_and_the_trajectory_cap_every_completion_is_scored_in_its_sampled_context(
        tiny_model_dir):
    """Accumulated context with a per-turn prompt limit that cuts the first prompt and every later environment
    message, and a trajectory cap that ends the episodes: the trainer's recomputed logprobs of the sampled tokens
    equal the sampling logprobs (issue 14: before, the sampler saw a cut prompt and training the whole sequence)."""
    from tests.fakes.count import make_count_env
    from transformers import AutoModelForCausalLM

    from evoharness_rl.engines.base import SamplingSettings
    from evoharness_rl.engines.hf import HFBackend
    from evoharness_rl.engines.tokens import encode_prompt
    from evoharness_rl.models import load_tokenizer
    from evoharness_rl.rollout.engine import EpisodeJob, RolloutEngine
    from evoharness_rl.rollout.episode import EpisodeSettings
    from evoharness_rl.rollout.pool import EnvPool

    tok = load_tokenizer(str(tiny_model_dir))
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    limit, cap, new = 90, 400, 12
    sampling = SamplingSettings(temperature=1.0, max_new_tokens=new, seed=0)
    with RolloutEngine(EnvPool(functools.partial(make_count_env), 1, 60), HFBackend(model, tok, batch_size=8), tok,
                       sampling, limit, max_trajectory_tokens=cap) as engine:
        trajs = engine.run([EpisodeJob("a/2-1", 0, 0), EpisodeJob("b/2-2", 1, 0)],
                           EpisodeSettings(max_steps=8, context="accumulated"))
        caps = engine.stats.token_caps
    for traj in trajs:
        assert traj.error is None and traj.token_capped and not traj.won and not traj.truncated
        assert len(encode_prompt(tok, traj.turns[0].messages)) > limit, "the first prompt must be over the limit"
        assert all(turn.prompt_truncated for turn in traj.turns), "every turn's addition must have been cut"
        first = len(traj.turns[0].prompt_ids)
        assert first == limit and len(traj.sequence_ids) - first <= cap
        previous = 0
        for turn in traj.turns:  # each prompt is the sequence so far; each turn added at most `limit` tokens
            n = len(turn.prompt_ids)
            assert turn.prompt_ids == traj.sequence_ids[:n] and n - previous <= limit
            previous = n + len(turn.completion_ids)
    assert caps == len(trajs)
    samples = [s for i, t in enumerate(trajs) for s in B.samples_from_trajectory(t, 1.0, i)]
    mb = B.collate(samples, tok.pad_token_id)
    with torch.no_grad():
        logp, _ = token_logprobs(model, mb, temperature=1.0)  # [B, K]
    mask = mb.loss_mask.bool()
    assert int(mask.sum()) == sum(t.generated_tokens for t in trajs) > 0
    torch.testing.assert_close(logp[mask], mb.old_logp[mask], atol=1e-4, rtol=0)


def test_a_turn_scored_outside_its_sampled_context_is_refused():
    """The old failure: a turn sampled after a cut prompt inside a whole-sequence row is an error, not a silent
    off-policy ratio."""
    from evoharness_rl.rollout.trajectory import Trajectory, Turn

    turn = Turn(index=0, messages=[], response="", action_kind="env", action="a", prompt_ids=[1, 4],
                completion_ids=[5], logprobs=[-0.5], prompt_truncated=True)
    traj = Trajectory(task_id="t", family="f", env="e", context="accumulated", turns=[turn],
                      sequence_ids=[1, 2, 3, 4, 5], loss_mask=[0, 0, 0, 0, 1], sequence_logprobs=[0, 0, 0, 0, -0.5])
    with pytest.raises(ValueError, match="turn 0 was sampled after a prompt that is not the sequence"):
        B.samples_from_trajectory(traj, 1.0, 0)
    turn.prompt_ids = [1, 2, 3, 4]
    assert len(B.samples_from_trajectory(traj, 1.0, 0)) == 1
