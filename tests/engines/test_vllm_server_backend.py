"""vllm_server and openai backends against a real vLLM OpenAI-compatible server on the tiny model."""

from __future__ import annotations

import pytest
import torch
from conftest import make_prompts, teacher_forced_logprobs

from evoharness_rl.config import ModelConfig, PolicyConfig
from evoharness_rl.engines import make_backend
from evoharness_rl.engines.base import GenerationRequest, SamplingSettings
from evoharness_rl.engines.openai import OpenAIBackend
from evoharness_rl.engines.vllm import VLLMServerBackend

pytestmark = [pytest.mark.vllm, pytest.mark.slow]  # starts a server process (~30-60 s on 2 cores)


def _requests(prompts):
    return [GenerationRequest(messages=[], prompt_ids=p, key=f"k{i}") for i, p in enumerate(prompts)]


def _assert_matches(model, prompts, completions):
    for prompt, c in zip(prompts, completions):
        assert c.error is None and len(c.completion_ids) == len(c.logprobs) > 0
        reference = teacher_forced_logprobs(model, prompt, c.completion_ids)
        assert torch.allclose(torch.tensor(c.logprobs), reference, atol=1e-3), (c.logprobs, reference.tolist())


def test_server_token_ids_and_logprobs(vllm_server, hf_model, tokenizer):
    backend = make_backend(PolicyConfig(backend="vllm_server", base_url=vllm_server), ModelConfig(),
                           tokenizer=tokenizer)
    assert isinstance(backend, VLLMServerBackend) and backend.model == "tiny"
    prompts = make_prompts(tokenizer, 6)
    out = backend.generate(_requests(prompts), SamplingSettings(temperature=1.0, max_new_tokens=32, seed=0))
    _assert_matches(hf_model, prompts, out)
    stopped = [c for c in out if c.finish_reason == "stop"]
    assert stopped and all(c.completion_ids[-1] == tokenizer.eos_token_id for c in stopped)
    assert all(c.text == tokenizer.decode(c.completion_ids, skip_special_tokens=True) for c in out)


def test_server_lora_adapter(vllm_server, tokenizer, lora_adapter):
    adapter_dir, merged = lora_adapter
    backend = VLLMServerBackend(vllm_server, tokenizer)
    backend.update_weights(str(adapter_dir))
    assert backend.model == "policy"
    prompts = make_prompts(tokenizer, 3)
    _assert_matches(merged, prompts, backend.generate(_requests(prompts), SamplingSettings(max_new_tokens=16, seed=1)))
    with pytest.raises(ValueError, match="LoRA adapter directory"):
        backend.update_weights(merged)


def test_openai_backend_chats_with_the_server(vllm_server):
    backend = make_backend(PolicyConfig(backend="openai", base_url=vllm_server, model_name="tiny"))
    assert isinstance(backend, OpenAIBackend)
    messages = [{"role": "user", "content": "go to shelf 1"}]
    out = backend.generate([GenerationRequest(messages=messages, key="e0")] * 2,
                           SamplingSettings(temperature=1.0, max_new_tokens=8, seed=0))
    assert all(c.error is None and c.finish_reason in ("stop", "length") and c.completion_ids == [] for c in out)
    assert isinstance(backend.chat_text(messages, SamplingSettings(temperature=0.0, max_new_tokens=8)), str)


def test_server_errors_become_error_completions(vllm_server, tokenizer):
    backend = VLLMServerBackend(vllm_server, tokenizer, model="no-such-model", max_retries=0)
    [c] = backend.generate(_requests(make_prompts(tokenizer, 1)), SamplingSettings(max_new_tokens=4))
    assert c.finish_reason == "error" and "404" in c.error
