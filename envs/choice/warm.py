"""The warm start of `choice`: the response format with a uniformly random colour, taught by a few supervised steps.

The policy then writes well-formed answers and, trained from scratch, starts at chance (one
success in three), so any rise of its success is what reinforcement learning taught it: which
button to press. A pretrained model keeps what pretraining gave it: a few steps at a small
learning rate teach it the format, not the answer (the answers they show are random).

    python -m evoharness_rl.envs.choice.warm MODEL OUT [--steps 120] [--lr 1e-2] [--seed 0] [--tasks 30]

writes the model to OUT with `warm.json` (the settings and seconds taken).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Sequence

from evoharness_rl.envs.choice.adapter import COLOURS, ChoiceEnv


def warm_choice_policy(model_dir: Path, out_dir: Path, steps: int = 120, seed: int = 0,
                       targets: tuple[str, ...] = COLOURS, tasks: int = 30, lr: float = 1e-2) -> Path:
    """`warm_start` on ChoiceEnv(tasks, targets) in env_only mode, each prompt paired with
    "<action>press COLOUR</action>" for a random colour."""
    responses = [f"<action>press {colour}</action>" for colour in COLOURS]
    return warm_start(model_dir, out_dir, ChoiceEnv(tasks, targets), responses, modes=("env_only",), steps=steps,
                      seed=seed, lr=lr)


def warm_start(model_dir: Path, out_dir: Path, env, responses: Sequence[str], modes: Sequence[str] = ("adaptive",),
               steps: int = 50, seed: int = 0, max_steps: int = 4, lr: float = 1e-2) -> Path:
    """SFT steps (AdamW at `lr`, 8 examples a step) on the first prompt of every train task of `env` (in each
    harness mode of `modes`), each paired with a response drawn uniformly from `responses`; the model is saved to
    `out_dir`, which is returned."""
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
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
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
    return Path(out_dir)


def main(argv=None) -> None:
    import argparse
    import json
    import time

    parser = argparse.ArgumentParser(prog="python -m evoharness_rl.envs.choice.warm", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", type=Path, help="the checkpoint to start from")
    parser.add_argument("out", type=Path, help="where the warm-started checkpoint goes")
    parser.add_argument("--steps", type=int, default=120, help="optimizer steps of 8 examples (default 120)")
    parser.add_argument("--lr", type=float, default=1e-2, help="AdamW learning rate (default 1e-2, the tiny model's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tasks", type=int, default=30, help="tasks of the three-target choice env (default 30)")
    args = parser.parse_args(argv)
    start = time.monotonic()
    out = warm_choice_policy(args.model, args.out, steps=args.steps, seed=args.seed, tasks=args.tasks, lr=args.lr)
    record = {"model": str(args.model), "steps": args.steps, "lr": args.lr, "seed": args.seed, "tasks": args.tasks,
              "responses": "random colour", "seconds": round(time.monotonic() - start, 1)}
    (out / "warm.json").write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(record))


if __name__ == "__main__":
    main()
