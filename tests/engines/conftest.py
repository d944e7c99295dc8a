"""Fixtures for backend tests: a tiny local checkpoint, its HF model, a vLLM engine and server."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))

from tiny_model import build_tiny_model  # noqa: E402


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture(scope="session")
def tokenizer(tiny_model_dir):
    from evoharness_rl.engines import load_tokenizer

    return load_tokenizer(str(tiny_model_dir))


@pytest.fixture(scope="session")
def hf_model(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()


def teacher_forced_logprobs(model, prompt_ids, completion_ids, temperature: float = 1.0) -> torch.Tensor:
    """log softmax(logits / T) of each completion id, from one forward pass over prompt + completion."""
    sequence = torch.tensor([list(prompt_ids) + list(completion_ids)])
    with torch.no_grad():
        logits = model(sequence).logits[0, len(prompt_ids) - 1 : -1].float()
    scaled = logits / temperature if temperature > 0 else logits
    return scaled.log_softmax(-1).gather(-1, torch.tensor(completion_ids)[:, None])[:, 0]


def make_prompts(tokenizer, n: int) -> list[list[int]]:
    from evoharness_rl.engines import encode_prompt

    words = ["go to shelf 1", "take mug 1 from desk 2", "open fridge 1", "look", "put apple in microwave 1"]
    return [
        encode_prompt(tokenizer, [{"role": "system", "content": "You act in a house."},
                                  {"role": "user", "content": " then ".join(words[: 1 + i % len(words)]) + f" ({i})"}])
        for i in range(n)
    ]


@pytest.fixture(scope="session")
def lora_adapter(tiny_model_dir, tmp_path_factory):
    """(adapter dir, HF model with that adapter merged in): a rank-8 LoRA with non-zero weights."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    config = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj", "down_proj"], init_lora_weights=False)
    torch.manual_seed(1)
    peft_model = get_peft_model(base, config)
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, 0.5)  # large enough to move the logprobs well beyond the test tolerance
    out = tmp_path_factory.mktemp("lora") / "adapter"
    peft_model.save_pretrained(out)
    merged = peft_model.merge_and_unload().eval()
    return out, merged


@pytest.fixture(scope="session")
def vllm_engine(tiny_model_dir):
    """One in-process vLLM engine (LoRA enabled) shared by the vllm tests."""
    pytest.importorskip("vllm")
    from evoharness_rl.engines.vllm import VLLMBackend

    backend = VLLMBackend(str(tiny_model_dir), dtype="float32", seed=0, max_model_len=512, enable_lora=True,
                          max_lora_rank=8)
    yield backend
    backend.release()


@pytest.fixture(scope="session")
def vllm_server(tiny_model_dir, tmp_path_factory):
    """A vLLM OpenAI-compatible server on the tiny model (LoRA updates allowed); yields its /v1 URL."""
    pytest.importorskip("vllm")
    from tests.vllm_server import vllm_server as start_server

    args = ("--max-model-len", "512", "--logprobs-mode", "processed_logprobs", "--enable-lora",
            "--max-lora-rank", "8", "--max-loras", "1")
    with start_server(tiny_model_dir, tmp_path_factory.mktemp("vllm-server"), args,
                      env={"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}, timeout_s=240) as url:
        yield url
