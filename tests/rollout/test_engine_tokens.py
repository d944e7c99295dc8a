"""Token bookkeeping through the engine with a real model (tiny Qwen3, hf backend, fp32).

The recorded sampling logprobs must equal a teacher-forced forward pass over the
recorded ids (temperature 1, top_p 1), per turn and over accumulated sequences, and the
loss mask must cover exactly the generated tokens.
"""

from __future__ import annotations

import pytest
import torch

from evoharness_rl.engines.base import SamplingSettings
from evoharness_rl.engines.tokens import encode_prompt, system_head_length
from evoharness_rl.rollout.engine import EpisodeJob, RolloutEngine
from evoharness_rl.rollout.episode import EpisodeSettings
from evoharness_rl.rollout.pool import EnvPool

SAMPLING = SamplingSettings(temperature=1.0, top_p=1.0, max_new_tokens=16, seed=0)
JOBS = [EpisodeJob("pick/2"), EpisodeJob("heat/3")]


@pytest.fixture
def engine(fake_factory, hf_backend):
    pool = EnvPool(fake_factory(), num_workers=2, step_timeout_s=60)
    with pool:
        yield RolloutEngine(pool, hf_backend, hf_backend.tokenizer, SAMPLING, max_prompt_tokens=4096)


def _forward_logprobs(model, ids: list[int]) -> torch.Tensor:
    """log p(ids[t] | ids[:t]) for t >= 1, teacher-forced: [len(ids) - 1]."""
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].float()
    return torch.log_softmax(logits[:-1], dim=-1).gather(1, torch.tensor(ids[1:])[:, None])[:, 0]


def test_per_turn_ids_and_logprobs_match_a_forward_pass(engine, hf_backend):
    settings = EpisodeSettings(mode="adaptive", context="per_turn", max_steps=2)
    trajs = engine.run(JOBS, settings)
    turns = [turn for t in trajs for turn in t.turns]
    assert trajs and all(t.error is None for t in trajs) and len(turns) >= 2
    for turn in turns:
        assert turn.prompt_ids == encode_prompt(hf_backend.tokenizer, turn.messages)
        assert 0 < len(turn.completion_ids) == len(turn.logprobs)
        ids = turn.prompt_ids + turn.completion_ids
        expected = _forward_logprobs(hf_backend.model, ids)[len(turn.prompt_ids) - 1 :]
        assert torch.allclose(torch.tensor(turn.logprobs), expected, atol=1e-3), (turn.logprobs, expected)
    assert engine.stats.generated_tokens == sum(len(t.completion_ids) for t in turns)
    assert trajs[0].sequence_ids == [] and trajs[0].loss_mask == []


def test_accumulated_sequence_mask_and_logprobs(engine, hf_backend):
    settings = EpisodeSettings(mode="adaptive", context="accumulated", max_steps=3)
    trajs = engine.run(JOBS, settings)
    for traj in trajs:
        assert traj.error is None and traj.turns
        seq, mask, lps = traj.sequence_ids, traj.loss_mask, traj.sequence_logprobs
        assert len(seq) == len(mask) == len(lps)
        generated = [i for turn in traj.turns for i in turn.completion_ids]
        assert [tok for tok, m in zip(seq, mask) if m] == generated  # mask 1 exactly on generated tokens
        for turn in traj.turns:  # each turn's prompt is the sequence so far; its completion follows unchanged
            n = len(turn.prompt_ids)
            assert seq[:n] == turn.prompt_ids
            assert seq[n : n + len(turn.completion_ids)] == turn.completion_ids
            assert all(mask[n : n + len(turn.completion_ids)])
        forward = _forward_logprobs(hf_backend.model, seq)
        positions = [i for i, m in enumerate(mask) if m]
        assert positions[0] > 0
        expected = forward[[p - 1 for p in positions]]
        recorded = torch.tensor([lps[p] for p in positions])
        assert torch.allclose(recorded, expected, atol=1e-3)
        assert all(lps[i] == 0.0 for i, m in enumerate(mask) if not m)
        # the first prompt is the rendered opening; the template's turn markers close each completion
        assert seq[: len(traj.turns[0].prompt_ids)] == encode_prompt(hf_backend.tokenizer, traj.turns[0].messages)


def test_long_prompts_are_truncated_and_counted(fake_factory, hf_backend):
    settings = EpisodeSettings(mode="adaptive", context="per_turn", max_steps=2)
    with EnvPool(fake_factory(), num_workers=1, step_timeout_s=60) as pool:
        engine = RolloutEngine(pool, hf_backend, hf_backend.tokenizer, SAMPLING, max_prompt_tokens=80)
        (traj,) = engine.run([EpisodeJob("pick/2")], settings)
    head = encode_prompt(hf_backend.tokenizer, traj.turns[0].messages)
    assert len(head) > 80, "the fake prompt must be longer than the limit for this test"
    for turn in traj.turns:
        assert turn.prompt_truncated and len(turn.prompt_ids) == 80
        full = encode_prompt(hf_backend.tokenizer, turn.messages)
        keep = system_head_length(hf_backend.tokenizer, turn.messages)
        assert 0 < keep < 80 and turn.prompt_ids[:keep] == full[:keep]  # the system message is kept
        assert turn.prompt_ids[keep:] == full[len(full) - (80 - keep) :]  # then the most recent tokens
    assert engine.stats.prompt_truncations == len(traj.turns)


def test_ids_and_logprobs_of_different_length_fail_loudly(fake_factory, hf_backend):
    class Broken:
        uses_tokens = True
        tokenizer = hf_backend.tokenizer

        def generate(self, requests, sampling):
            from evoharness_rl.engines.base import Completion

            return [Completion("<action>look</action>", completion_ids=[5, 6, 7], logprobs=[-1.0]) for _ in requests]

        def release(self):
            pass

    with EnvPool(fake_factory(), num_workers=1, step_timeout_s=60) as pool:
        engine = RolloutEngine(pool, Broken(), hf_backend.tokenizer, SAMPLING)
        with pytest.raises(ValueError, match="3 completion ids but 1 logprobs"):
            engine.run([EpisodeJob("pick/2")], EpisodeSettings(context="per_turn", max_steps=2))
        assert pool.live_keys == set()  # the episode was freed from its worker


def test_greedy_jobs_play_the_greedy_episode_whatever_their_seed(engine):
    """grpo.greedy_samples: greedy members of a group replay one episode (the greedy policy's); sampled ones differ."""
    settings = EpisodeSettings(mode="adaptive", context="per_turn", max_steps=3)
    jobs = [EpisodeJob("pick/2", group=0, sample=k, greedy=k < 2) for k in range(4)]
    trajs = engine.run(jobs, settings)
    ids = [[tuple(turn.completion_ids) for turn in t.turns] for t in trajs]
    assert all(t.error is None for t in trajs)
    assert ids[0] == ids[1] and ids[2] != ids[3] and ids[0] not in ids[2:]
