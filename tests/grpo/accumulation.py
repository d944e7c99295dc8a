"""One GRPO update's optimisation on fixed synthetic samples, recording what each optimizer step saw.

Run in two gloo processes (torchrun, tests/grpo/test_grpo_accumulation.py) and in one process on
the union of their samples: the trainer's `optimizer_step` / `optimise` must make one optimizer
step per mini-batch whatever the micro-batch count, all-reduce gradients only when accelerate
says the accumulation is complete, and give the same gradients as one process accumulating
everything.

    python -m torch.distributed.run --nproc_per_node 2 tests/grpo/accumulation.py MODEL_DIR OUT_DIR
"""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path

import torch

PROMPTS, GROUP, MINI_BATCH = 4, 2, 4  # 8 trajectories per update, 2 mini-batches (2 optimizer steps)


def mini_batches(world: int, rank: int):
    """Samples of each mini-batch on `rank` (world 2), or of both ranks together (world 1): lengths and counts vary,
    so the ranks run different numbers of micro-batches (the trainer pads the shorter one)."""
    from evoharness_rl.grpo.batch import Sample

    rng = random.Random(0)
    batches = []
    for k in range(2):
        per_rank = []
        for r in range(2):
            rows = []
            for i in range(3 + r + k):  # 3..5 samples: micro-batch counts differ across ranks and mini-batches
                prompt = [rng.randrange(5, 200) for _ in range(rng.randrange(3, 12))]
                completion = [rng.randrange(5, 200) for _ in range(rng.randrange(1, 6))]
                mask = [0] * len(prompt) + [1] * len(completion)
                old = [0.0] * len(prompt) + [rng.uniform(-6.0, -4.0) for _ in completion]
                rows.append(Sample(prompt + completion, mask, old, rng.choice([-1.0, 1.0]) * rng.uniform(0.5, 1.5), i))
            per_rank.append(rows)
        batches.append(per_rank[rank] if world == 2 else per_rank[0] + per_rank[1])
    return batches


def trajectories(rank: int, world: int):
    """This rank's share of an update's trajectories (prompts x group), with 1-3 token-carrying turns each."""
    from evoharness_rl.rollout.trajectory import Trajectory, Turn

    rng = random.Random(1)
    out = []
    for t in range(PROMPTS * GROUP):
        turns = []
        for i in range(1 + t % 3):
            completion = [rng.randrange(5, 200) for _ in range(3)]
            turns.append(Turn(index=i, messages=[], response="", action_kind="env", action="a",
                              prompt_ids=[rng.randrange(5, 200) for _ in range(6)], completion_ids=completion,
                              logprobs=[-5.0] * 3))
        out.append(Trajectory(task_id=f"t{t // GROUP}", family="f", env="fake", turns=turns))
    share = len(out) // world
    return out[rank * share:(rank + 1) * share]


def build(model_dir: str, micro_batch_samples: int):
    """A trainer Run on the tiny model, prepared by accelerate (DDP when launched in several processes)."""
    from accelerate import Accelerator
    from transformers import AutoModelForCausalLM

    from evoharness_rl.config import Config
    from evoharness_rl.grpo import checkpoint as ckpt
    from evoharness_rl.grpo.batch import make_plan
    from evoharness_rl.grpo.build import Run, SilentLog

    torch.manual_seed(0)
    acc = Accelerator(cpu=True)
    cfg = Config()
    cfg.grpo.prompts_per_update, cfg.grpo.group_size, cfg.grpo.mini_batch_trajectories = PROMPTS, GROUP, MINI_BATCH
    cfg.grpo.micro_batch_samples, cfg.grpo.kl_coef, cfg.grpo.max_grad_norm = micro_batch_samples, 0.0, 1e9
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    model, optimizer, scheduler = acc.prepare(model, optimizer, scheduler)
    run = Run(cfg=cfg, accelerator=acc, plan=make_plan(cfg.grpo, acc.num_processes), log=SilentLog(), model=model,
              tokenizer=type("T", (), {"pad_token_id": 0})(), reference=None, optimizer=optimizer,
              scheduler=scheduler, sampler=None, eval_tasks=[], state=ckpt.TrainerState(), out_dir=None)
    return run


def record(run) -> dict:
    """Hooks: the gradients at each optimizer step, and accelerate's sync flag at each gradient all-reduce."""
    seen = {"grads": [], "sync_flags": []}
    params = [p for p in run.accelerator.unwrap_model(run.model).parameters()]
    inner = run.optimizer.optimizer  # the torch AdamW inside accelerate's wrapper
    inner.register_step_pre_hook(lambda *_: seen["grads"].append([p.grad.detach().clone() for p in params]))
    if isinstance(run.model, torch.nn.parallel.DistributedDataParallel):
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        def counting(state, bucket):
            seen["sync_flags"].append(run.accelerator.sync_gradients)
            return allreduce_hook(state, bucket)

        run.model.register_comm_hook(None, counting)
    return seen


def main(model_dir: str, out_dir: str) -> None:
    from evoharness_rl.grpo.trainer import Scored, optimise, optimizer_step

    out = Path(out_dir)
    run = build(model_dir, micro_batch_samples=1)
    world, rank = run.accelerator.num_processes, run.accelerator.process_index
    seen = record(run)
    micro_counts = []
    for samples in mini_batches(world, rank):
        micro_counts.append(len(samples))  # micro_batch_samples=1: one micro-batch per sample
        assert optimizer_step(run, samples).bad_reason is None
    if rank == 0:
        torch.save(seen["grads"], out / f"grads_world{world}.pt")

    # the whole update loop: optimizer steps per update must equal the batch plan
    run = build(model_dir, micro_batch_samples=2)
    counted = record(run)
    trajs = trajectories(rank, world)
    scored = Scored(trajs, [1.0 if i % 2 else -1.0 for i in range(len(trajs))], [True] * len(trajs), 0)
    stats = optimise(run, scored, u=0)
    summary = {"world": world, "micro_batches": micro_counts, "sync_flags": seen["sync_flags"],
               "steps_per_update": len(counted["grads"]), "plan_steps": run.plan.optimizer_steps_per_update,
               "logged_steps": stats["optimizer_steps"], "state_steps": run.state.optimizer_steps,
               "update_sync_flags": counted["sync_flags"]}
    (out / f"summary_world{world}_rank{rank}.json").write_text(json.dumps(summary))
    if world > 1:  # leave the launch's process group, then skip interpreter teardown: the DDP models still hold the
        # gloo group, and its threads torn down among the interpreter's last objects are the likeliest source of the
        # rank abort CI saw twice ("terminate called without an active exception"). In one process (the test's own,
        # which may hold an in-process vLLM engine's group) there is nothing of ours to leave.
        run.accelerator.wait_for_everyone()
        run.accelerator.end_training()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
