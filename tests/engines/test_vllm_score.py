"""`VLLMBackend.score`: teacher-forced logprobs of a given completion under the weights the engine serves now,
the engine side of GRPO's weight-sync check (grpo/trainer.py, `check_sync`)."""

from __future__ import annotations

import pytest
import torch
from conftest import make_prompts, teacher_forced_logprobs

pytestmark = [pytest.mark.vllm, pytest.mark.slow]  # the session's vLLM engine (tests/engines/conftest.py)

COMPLETION_TEXT = " go to shelf 1 then look"


@pytest.fixture
def back_to_base(vllm_engine, tiny_model_dir):
    yield
    vllm_engine.update_weights(str(tiny_model_dir))


def test_score_is_the_served_models_teacher_forced_logprobs(vllm_engine, hf_model, tokenizer, lora_adapter,
                                                             back_to_base):
    adapter_dir, merged = lora_adapter
    prompt = make_prompts(tokenizer, 1)[0]
    completion = tokenizer.encode(COMPLETION_TEXT, add_special_tokens=False)
    base = torch.tensor(vllm_engine.score(prompt, completion))
    assert len(base) == len(completion)
    assert torch.allclose(base, teacher_forced_logprobs(hf_model, prompt, completion), atol=1e-3)

    vllm_engine.update_weights(str(adapter_dir))  # now the adapter is served: the score follows it
    adapted = torch.tensor(vllm_engine.score(prompt, completion))
    assert torch.allclose(adapted, teacher_forced_logprobs(merged, prompt, completion), atol=1e-3)
    assert (adapted - base).abs().max() > 1e-2
