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
