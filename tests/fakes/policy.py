"""A warm-started tiny policy: a few supervised steps that teach the response format."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Sequence


def warm_start(model_dir: Path, out_dir: Path, env, responses: Sequence[str], modes: Sequence[str] = ("adaptive",),
               steps: int = 50, seed: int = 0, max_steps: int = 4) -> Path:
    """SFT steps on the first prompt of every task of `env` (in each harness mode of `modes`), each paired with
    a response drawn uniformly from `responses`; the result is saved to `out_dir`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from evoharness_rl.rollout.episode import Episode, EpisodeSettings

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    rng = random.Random(seed)
    prompts = []
    for task_id in env.task_ids("train"):
        for mode in modes:
            episode = Episode(env, EpisodeSettings(mode=mode, max_steps=max_steps))
            episode.reset(task_id)
            prompts.append(tok.apply_chat_template(episode.prompt(), add_generation_prompt=True, tokenize=False))
    torch.manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(steps):
        ids, labels = [], []
        for _ in range(8):
            prompt = tok(rng.choice(prompts), add_special_tokens=False)["input_ids"]
            answer = tok(rng.choice(responses) + "<|im_end|>", add_special_tokens=False)["input_ids"]
            ids.append(prompt + answer)
            labels.append([-100] * len(prompt) + answer)
        width = max(map(len, ids))
        input_ids = torch.tensor([x + [tok.pad_token_id] * (width - len(x)) for x in ids])
        label_ids = torch.tensor([y + [-100] * (width - len(y)) for y in labels])
        attention = torch.tensor([[1] * len(x) + [0] * (width - len(x)) for x in ids])
        loss = model(input_ids=input_ids, attention_mask=attention, labels=label_ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    return out_dir
