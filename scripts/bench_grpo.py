"""Throughput of the GRPO update next to a plain forward + backward of the same tokens.

    python scripts/bench_grpo.py                          # CPU: tiny and small local models
    python scripts/bench_grpo.py --sizes qwen3-0.6b qwen3-1.7b --device cuda   # GPU, bf16, from config
    python scripts/bench_grpo.py --sizes models/smollm2   # a real checkpoint directory (init-model source=...)

The update is the trainer's own code (`grpo.trainer.optimizer_step`: left-padded
micro-batches, logits for the completion tokens only, reference forward, PPO-clip + k3 KL +
entropy loss, AdamW step) on synthetic per-turn samples (`--prompt` prompt tokens +
`--completion` generated tokens each). The baseline is a plain causal-LM step on the same
token ids: one forward over every position, cross-entropy, backward, AdamW step. Both report
tokens per second counting every token in the batch (prompt + completion); the ratio
update / plain is the trainer's overhead (below 1: slower than plain; the reference forward
alone costs about a third of a plain step). On a GPU, MFU = 6 * parameters * tokens/s / peak
bf16 FLOP/s, and the peak memory of each.

Qwen3-0.6B/1.7B shapes come from their published configs (no weights needed: speed and
memory do not depend on the values).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from types import SimpleNamespace

import torch

QWEN3_SHAPES = {  # Qwen3 config.json values (hidden, intermediate, layers, heads, kv heads, head_dim, vocab)
    "qwen3-0.6b": dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
                       num_key_value_heads=8, head_dim=128, vocab_size=151936, tie_word_embeddings=True),
    "qwen3-1.7b": dict(hidden_size=2048, intermediate_size=6144, num_hidden_layers=28, num_attention_heads=16,
                       num_key_value_heads=8, head_dim=128, vocab_size=151936, tie_word_embeddings=True),
}
PEAK_BF16_FLOPS = {"H200": 989e12, "H100": 989e12, "A100": 312e12}  # dense bf16 tensor-core peaks


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", default=["tiny", "small"],
                        help="tiny | small | base (local init_model) | qwen3-0.6b | qwen3-1.7b (shapes from config) | a "
                             "checkpoint directory (real weights, e.g. models/smollm2)")
    parser.add_argument("--device", default="auto", help="auto | cpu | cuda")
    parser.add_argument("--samples", type=int, default=8, help="per-turn samples per optimizer step (= micro-batch)")
    parser.add_argument("--prompt", type=int, default=256, help="prompt tokens per sample")
    parser.add_argument("--completion", type=int, default=64, help="completion (loss) tokens per sample")
    parser.add_argument("--steps", type=int, default=3, help="timed optimizer steps (after one warm-up step)")
    parser.add_argument("--gradient-checkpointing", action="store_true", help="recompute activations (GPU runs)")
    return parser.parse_args()


def build_model(size: str, device: str, dtype: torch.dtype):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    if size in QWEN3_SHAPES:
        config = Qwen3Config(max_position_embeddings=40960, dtype=dtype, **QWEN3_SHAPES[size])
        with torch.device(device):
            return Qwen3ForCausalLM(config).to(dtype)
    from pathlib import Path

    from evoharness_rl.models import init_model, load_model

    path = size if Path(size).is_dir() else init_model(size, tempfile.mkdtemp(prefix=f"bench-{size}-"))
    return load_model(SimpleNamespace(path=str(path), dtype="float32", attn_implementation="sdpa",
                                      trust_remote_code=False), device=device)


def synthetic_samples(args, vocab: int):
    from evoharness_rl.grpo.batch import Sample

    g = torch.Generator().manual_seed(0)
    rows = []
    for i in range(args.samples):
        ids = torch.randint(10, vocab, (args.prompt + args.completion,), generator=g).tolist()
        old = (-torch.rand(args.completion, generator=g) * 3).tolist()
        rows.append(Sample(ids, [0] * args.prompt + [1] * args.completion, [0.0] * args.prompt + old,
                           advantage=1.0 if i % 2 else -1.0, trajectory=i))
    return rows


def grpo_run(model, reference_model, device: str):
    """A `trainer.Run` holding just what `optimizer_step` uses."""
    from accelerate import Accelerator

    from evoharness_rl.config import Config
    from evoharness_rl.grpo.batch import make_plan
    from evoharness_rl.grpo.checkpoint import TrainerState
    from evoharness_rl.grpo.policy import Reference
    from evoharness_rl.grpo.build import Run, SilentLog

    cfg = Config()
    cfg.grpo.micro_batch_samples = 10**6  # one micro-batch per step: the plain step runs the same rows at once
    acc = Accelerator(cpu=device == "cpu")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6, weight_decay=0.01, fused=device == "cuda")
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    model, optimizer, scheduler = acc.prepare(model, optimizer, scheduler)
    reference = Reference(model=reference_model)
    return Run(cfg=cfg, accelerator=acc, plan=make_plan(cfg.grpo, 1), log=SilentLog(), model=model,
               tokenizer=SimpleNamespace(pad_token_id=0), reference=reference, optimizer=optimizer, scheduler=scheduler,
               sampler=None, eval_tasks=[], state=TrainerState(), out_dir=None)


def timed(step, steps: int, device: str) -> tuple[float, float]:
    """(seconds per step, peak GiB) over `steps` steps after one warm-up."""
    step()
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    if device == "cuda":
        torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else 0.0
    return (time.perf_counter() - start) / steps, peak


def plain_step_time(model, samples, args, device: str) -> tuple[float, float]:
    """A causal-LM step on the same rows: forward over every position, cross-entropy, backward, AdamW."""
    from evoharness_rl.grpo.batch import collate

    batch = collate(samples, pad_id=0).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6, fused=device == "cuda")

    def step():
        loss = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, labels=batch.input_ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return timed(step, args.steps, device)


def grpo_step_time(model, size: str, samples, args, device: str, dtype) -> tuple[float, float]:
    """The trainer's optimizer step (policy + reference forward, GRPO loss, AdamW) on the same rows."""
    from evoharness_rl.grpo.trainer import optimizer_step

    reference = build_model(size, device, dtype).requires_grad_(False).eval()
    reference.load_state_dict(model.state_dict())
    run = grpo_run(model, reference, device)
    return timed(lambda: optimizer_step(run, samples), args.steps, device)


def bench(size: str, args, device: str) -> dict:
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model = build_model(size, device, dtype)
    if args.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.config.use_cache = False
    params = sum(p.numel() for p in model.parameters())
    samples = synthetic_samples(args, model.config.vocab_size)
    tokens = sum(len(s.input_ids) for s in samples)
    plain_s, plain_peak = plain_step_time(model, samples, args, device)
    grpo_s, grpo_peak = grpo_step_time(model, size, samples, args, device, dtype)
    out = {"size": size, "params_m": params / 1e6, "tokens_per_step": tokens,
           "grpo_tok_s": tokens / grpo_s, "plain_tok_s": tokens / plain_s}
    out["ratio"] = out["grpo_tok_s"] / out["plain_tok_s"]
    if device == "cuda":
        name = torch.cuda.get_device_name()
        peak = next((v for k, v in PEAK_BF16_FLOPS.items() if k in name), None)
        for kind in ("grpo", "plain"):
            out[f"{kind}_mfu"] = 6 * params * out[f"{kind}_tok_s"] / peak if peak else float("nan")
        out.update(grpo_peak_gib=grpo_peak, plain_peak_gib=plain_peak, gpu=name)
    return out


def main() -> None:
    args = parse_args()
    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    print(f"device {device} ({torch.get_num_threads()} CPU threads); {args.samples} samples x ({args.prompt} prompt + "
          f"{args.completion} completion) tokens per step; {args.steps} timed steps")
    for size in args.sizes:
        r = bench(size, args, device)
        line = (f"{r['size'][-11:]:>11} {r['params_m']:8.1f}M params  GRPO update {r['grpo_tok_s']:10,.0f} tok/s  "
                f"plain fwd+bwd {r['plain_tok_s']:10,.0f} tok/s  ratio {r['ratio']:.2f}")
        if device == "cuda":
            line += (f"  MFU {r['grpo_mfu']:.1%} vs {r['plain_mfu']:.1%}  peak {r['grpo_peak_gib']:.1f} vs "
                     f"{r['plain_peak_gib']:.1f} GiB")
        print(line, flush=True)
        if device == "cuda":
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
