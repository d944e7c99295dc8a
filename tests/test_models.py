"""init-model: a local tokenizer + Qwen3 checkpoint that loads offline and renders per-turn prompts."""

from __future__ import annotations

import pytest
import torch

from evoharness_rl.config import ModelConfig
from evoharness_rl.models import (IM_END, SIZES, CheckpointError, build_model, count_parameters, env_prompt_texts,
                                  init_model, load_model, load_tokenizer)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return init_model("tiny", tmp_path_factory.mktemp("m") / "tiny", seed=0)


def per_turn_messages():
    system, template = env_prompt_texts()["alfworld"]
    user = template.format(objective="put a clean mug in shelf", observation="You arrive at shelf 1.",
                           actions="go to shelf 1, look", history="(none)", harness_views="PLAN:\n[ ] find mug")
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def test_checkpoint_loads_offline_with_plain_transformers(tiny, monkeypatch):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model = AutoModelForCausalLM.from_pretrained(tiny)
    tokenizer = AutoTokenizer.from_pretrained(tiny)
    assert type(model).__name__ == "Qwen3ForCausalLM"
    assert 0.5e6 < count_parameters(model) < 2e6
    assert model.config.max_position_embeddings >= 8192
    assert model.generation_config.eos_token_id == tokenizer.convert_tokens_to_ids(IM_END) == tokenizer.eos_token_id
    assert tokenizer.pad_token_id not in (None, tokenizer.eos_token_id)
    assert 2000 <= len(tokenizer) <= 4200
    text = "héllo 日本 <action>go</action>"
    assert tokenizer.decode(tokenizer(text)["input_ids"]) == text  # byte-level: any text round-trips


def test_chat_template_renders_per_turn_prompt_and_assistant_mask(tiny):
    tokenizer = load_tokenizer(str(tiny))
    messages = per_turn_messages()
    prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert prompt.startswith("<|im_start|>system\nYou are an autonomous")
    assert "<|im_start|>user\nOBJECTIVE: put a clean mug in shelf" in prompt
    assert prompt.endswith("<|im_end|>\n<|im_start|>assistant\n")
    response = "<think>The mug may be here.</think><action>go to shelf 1</action>"
    full = tokenizer.apply_chat_template(messages + [{"role": "assistant", "content": response}], tokenize=True,
                                         return_dict=True, return_assistant_tokens_mask=True)
    ids, mask = full["input_ids"], full["assistant_masks"]
    assert tokenizer.decode([t for t, m in zip(ids, mask) if m]) == response + IM_END
    prompt_ids = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True,
                                               add_generation_prompt=True)["input_ids"]
    assert ids[: len(prompt_ids)] == prompt_ids and not any(mask[: len(prompt_ids)])
    assert len(prompt_ids) < 700  # the per-turn prompt stays short in tokens


def test_generation_stops_at_end_of_turn(tiny):
    model = load_model(ModelConfig(path=str(tiny)), device="cpu")
    tokenizer = load_tokenizer(str(tiny))
    assert next(model.parameters()).dtype == torch.float32  # auto on CPU
    ids = tokenizer.apply_chat_template(per_turn_messages(), add_generation_prompt=True, return_tensors="pt",
                                        return_dict=True)["input_ids"]
    with torch.no_grad():
        # make <|im_end|> the likeliest next token (tied weights): its row points along the last hidden state
        hidden = model(ids, output_hidden_states=True).hidden_states[-1][0, -1]
        model.lm_head.weight[tokenizer.eos_token_id] = 100.0 * hidden / hidden.norm()
        out = model.generate(ids, max_new_tokens=5, do_sample=False)
    assert out[0, -1].item() == tokenizer.eos_token_id and out.shape[1] == ids.shape[1] + 1


def test_sizes_are_about_1m_10m_50m():
    from transformers import Qwen3Config, Qwen3ForCausalLM

    counts = {}
    for size in SIZES:
        with torch.device("meta"):  # shapes only, no memory
            config = Qwen3Config(vocab_size=3500, tie_word_embeddings=True, **SIZES[size])
            counts[size] = count_parameters(Qwen3ForCausalLM(config))
    assert 0.5e6 < counts["tiny"] < 2e6 and 1.8e6 < counts["mini"] < 3e6 and 7e6 < counts["small"] < 14e6
    assert 35e6 < counts["base"] < 70e6


def test_same_seed_same_weights(tiny):
    tokenizer = load_tokenizer(str(tiny))
    a, b, c = (build_model("tiny", tokenizer, seed=s) for s in (3, 3, 4))
    assert torch.equal(a.model.layers[0].mlp.up_proj.weight, b.model.layers[0].mlp.up_proj.weight)
    assert not torch.equal(a.model.layers[0].mlp.up_proj.weight, c.model.layers[0].mlp.up_proj.weight)


def test_unknown_size_and_bad_paths_are_named(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="size='huge'.*tiny, mini, small, base"):
        init_model("huge", tmp_path / "x")
    with pytest.raises(CheckpointError, match="model.path is not set"):
        load_tokenizer(None)
    with pytest.raises(CheckpointError, match="missing-ckpt.*not a directory.*init-model"):
        load_model(ModelConfig(path=str(tmp_path / "missing-ckpt")), device="cpu")


def test_tokenizer_without_chat_template_is_rejected(tiny, tmp_path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny)
    tokenizer.chat_template = None
    tokenizer.save_pretrained(tmp_path / "plain")
    (tmp_path / "plain" / "chat_template.jinja").unlink(missing_ok=True)
    with pytest.raises(ValueError, match=f"{tmp_path / 'plain'}.*no chat template"):
        load_tokenizer(str(tmp_path / "plain"))
