"""A null baseline for an RL update: the checkpoint moved in a random direction by a chosen KL.

GRPO at demo scale moves the SFT policy by a KL of about 0.01 per token. Whether the change in
greedy success that follows is the reward's doing or just what any move of that size does to
a small greedy policy is measured by evaluating random moves of the same size:

    # the KL a GRPO checkpoint moved, measured on the turns of an evaluation run of the start checkpoint
    python scripts/random_move.py --start outputs/demo/sft/merged --turns outputs/demo/eval_sft_none_valid_seen \
        --measure outputs/demo/grpo/final
    # a random move of the same KL, saved as an HF checkpoint to evaluate like any other
    python scripts/random_move.py --start outputs/demo/sft/merged --turns outputs/demo/eval_sft_none_valid_seen \
        --kl 0.01 --seed 1 --out outputs/exp/random_move_seed1/model

The KL is KL(start || moved) per completion token, averaged over the first turns of the
evaluation run's episodes (their recorded prompt and completion ids), with the logits divided
by --temperature (GRPO scores its rollouts at grpo.temperature; the demo's is 0.7). The
direction is Gaussian noise scaled per tensor by that tensor's standard deviation; its length
is found by bisection.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import torch


def turns_of(run: Path, episodes: int, per_episode: int) -> list[tuple[list[int], list[int]]]:
    files = sorted((run / "trajectories").glob("*.json"))[:episodes]
    out = []
    for f in files:
        for turn in json.loads(f.read_text())["turns"][:per_episode]:
            if turn.get("prompt_ids") and turn.get("completion_ids"):
                out.append((turn["prompt_ids"], turn["completion_ids"]))
    if not out:
        sys.exit(f"{run}: no turns with token ids in trajectories/*.json; pass an `eval` run directory of an hf policy")
    return out


def completion_logprobs(model, turns, temperature: float) -> list[torch.Tensor]:
    out = []
    with torch.no_grad():
        for prompt, completion in turns:
            logits = model(torch.tensor([prompt + completion])).logits[0, len(prompt) - 1:-1]
            out.append(torch.log_softmax(logits.float() / temperature, -1))
    return out


def kl(ref: list[torch.Tensor], new: list[torch.Tensor]) -> float:
    """Mean over turns of the mean per-token KL(ref || new)."""
    return sum((r.exp() * (r - n)).sum(-1).mean().item() for r, n in zip(ref, new)) / len(ref)


def main(argv=None) -> None:
    from transformers import AutoModelForCausalLM

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--start", required=True, help="HF checkpoint to move (e.g. the SFT policy)")
    ap.add_argument("--turns", required=True, help="an `eval` run directory of --start (trajectories/ with token ids)")
    ap.add_argument("--measure", nargs="*", default=[], help="checkpoints whose KL from --start to print (no move)")
    ap.add_argument("--kl", type=float, default=0.01, help="target KL(start || moved) per completion token")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random direction")
    ap.add_argument("--out", help="where to save the moved checkpoint")
    ap.add_argument("--temperature", type=float, default=0.7, help="logits are divided by this before the KL")
    ap.add_argument("--episodes", type=int, default=40, help="episodes of --turns to read")
    ap.add_argument("--turns-per-episode", type=int, default=4, help="first turns of each episode to read")
    args = ap.parse_args(argv)
    if not args.measure and not args.out:
        ap.error("pass --out (make a random move) or --measure CHECKPOINT... (print KLs)")

    start = AutoModelForCausalLM.from_pretrained(args.start, dtype=torch.float32).eval()
    turns = turns_of(Path(args.turns), args.episodes, args.turns_per_episode)
    ref = completion_logprobs(start, turns, args.temperature)
    for other in args.measure:
        moved = AutoModelForCausalLM.from_pretrained(other, dtype=torch.float32).eval()
        print(f"{other}: KL(start || it) = {kl(ref, completion_logprobs(moved, turns, args.temperature)):.4f} "
              f"per completion token over {len(turns)} turns")
    if not args.out:
        return

    state = {k: v.clone() for k, v in start.state_dict().items()}
    gen = torch.Generator().manual_seed(args.seed)
    noise = {k: torch.randn(v.shape, generator=gen) * v.float().std().clamp_min(1e-3)
             for k, v in sorted(state.items()) if v.is_floating_point() and v.dim() > 0 and v.numel() > 1}

    def kl_at(scale: float) -> float:
        start.load_state_dict({k: state[k] + scale * noise[k] if k in noise else state[k] for k in state})
        return kl(ref, completion_logprobs(start, turns, args.temperature))

    lo, hi = 0.0, 0.05
    while kl_at(hi) < args.kl and hi < 10.0:  # grow the bracket until it holds the target
        lo, hi = hi, hi * 2
    for _ in range(20):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if kl_at(mid) < args.kl else (lo, mid)
    reached = kl_at(hi)
    print(f"seed {args.seed}: noise {hi:.4f} x each tensor's std -> KL(start || moved) = {reached:.4f} "
          f"per completion token over {len(turns)} turns")
    out = Path(args.out)
    start.save_pretrained(out)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
                 "generation_config.json"):
        if (Path(args.start) / name).exists():
            shutil.copy(Path(args.start) / name, out / name)


if __name__ == "__main__":
    main()
