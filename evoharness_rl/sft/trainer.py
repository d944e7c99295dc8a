"""`evoharness-rl sft`: teacher traces -> next-action dataset -> TRL SFTTrainer -> merged checkpoint.

    run_sft(cfg)  # cfg: the whole Config; reads cfg.sft, cfg.model, cfg.logger, cfg.out_dir

Steps (paper Sec. 2.3, "Supervised initialization"; defaults from Table 10):

1. dataset: `sft.data` (or `sft.data_mix`) names `collect` outputs (trajectory JSONL) or a
   saved SFT dataset; successful episodes are flattened into next-action conversations
   (sft/data.py), deduplicated, mixed, split by episode and saved to out_dir/dataset;
2. tokenize with the checkpoint's chat template: loss only on assistant tokens (the
   template's `{% generation %}` spans, as TRL's `assistant_only_loss`), over-length
   examples cut from the middle of the prompt or dropped (rule in sft/data.py; counted);
3. TRL `SFTTrainer` (on CPU each batch runs as length-sorted rows trimmed to their own
   length, and the LM head only on labelled positions, sft/loss.py):
   LoRA (r=64, alpha=128, all linear layers) or full parameters (`sft.lora=false`),
   AdamW, cosine schedule with warmup, gradient clipping; gradient checkpointing on GPU only; checkpoints every `sft.save_steps` (`resume=true` continues
   from the last one); loss / lr / tokens-per-second to metrics.jsonl (+ wandb);
4. save: LoRA -> out_dir/adapter, merged into out_dir/merged (`sft.merge`); full ->
   out_dir/merged. The returned path is what `grpo` / `eval` take as `model.path`.

Multi-GPU / multi-node: run the same entry under `accelerate launch` (scripts/sft.sh,
configs/accelerate/); the dataset is built by the main process, the others load it.
Several CPU processes: `torchrun --nproc_per_node N -m evoharness_rl sft ...` (gloo DDP;
accelerate's own multi-CPU launcher needs MPI).

Precision: full-parameter training keeps fp32 master weights (bf16 autocast on GPU),
because lr 1e-5 updates vanish in pure-bf16 weights; LoRA loads the base in
`model.dtype` (auto: bf16 on GPU, fp32 on CPU) and trains fp32 adapters.
"""

from __future__ import annotations

import json
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Optional

import torch
from transformers import TrainerCallback
from transformers.trainer_callback import PrinterCallback

from evoharness_rl.models import load_model, load_tokenizer, resolve_device
from evoharness_rl.runlog import ProgressBar, RunLogger
from evoharness_rl.sft import data
from evoharness_rl.sft.merge import merge_adapter


def run_sft(cfg: Any) -> Path:
    """Train the policy on successful teacher traces; returns the merged (or adapter) checkpoint path."""
    from accelerate import PartialState

    device = resolve_device(cfg.device)
    # cpu=True lets CPU processes started by torchrun form a gloo group (as TrainingArguments does later).
    state = PartialState(cpu=not device.startswith("cuda"))
    out = Path(cfg.out_dir)
    log = RunLogger(out, cfg.logger) if state.is_main_process else None
    try:
        tokenizer = load_tokenizer(cfg.model.path, cfg.model.trust_remote_code)
        dataset = prepare_dataset(cfg, tokenizer, log, state)
        template = training_chat_template(tokenizer)
        train, counts = data.tokenize_examples(dataset["train"], tokenizer, cfg.sft.max_seq_length, template)
        validation = None
        if "validation" in dataset:
            validation, _ = data.tokenize_examples(dataset["validation"], tokenizer, cfg.sft.max_seq_length, template)
        _info(log, f"tokenized (max_seq_length={cfg.sft.max_seq_length}): {counts['examples']} train examples, "
                   f"{counts['truncated']} truncated (middle of the prompt cut), {counts['dropped']} dropped "
                   "(last response did not fit)")
        if len(train) == 0:
            raise data.SFTDataError(f"no training example fits sft.max_seq_length={cfg.sft.max_seq_length}; "
                                    "raise it (every example's last response must fit)")
        trainer = build_trainer(cfg, device, tokenizer, train, validation, log)
        trainer.train(resume_from_checkpoint=_resume_checkpoint(cfg, log))
        return finish(trainer, cfg, tokenizer, log, device)
    finally:
        if log is not None:
            log.close()


def _info(log: Optional[RunLogger], message: str) -> None:
    if log is not None:
        log.info(message)


# ---------------------------------------------------------------------- dataset


def prepare_dataset(cfg: Any, tokenizer: Any, log: Optional[RunLogger], state: Any = None):
    """Build (main process) or load (others, or `resume=true`) out_dir/dataset; checks prompt versions."""
    target = Path(cfg.out_dir) / "dataset"
    sources = dict(cfg.sft.data_mix) or ({cfg.sft.data: 1.0} if cfg.sft.data else {})
    if not sources:
        raise data.SFTDataError("sft.data is not set; point it at a `collect` output directory (trajectory JSONL) "
                                "or a saved SFT dataset, or give several with sft.data_mix={dir: weight}")
    main = state is None or state.is_main_process
    with state.main_process_first() if state is not None else nullcontext():
        if main and not (cfg.resume and data.is_sft_dataset(target)):
            examples = data.mix([(_examples_from(src, cfg, log), float(w)) for src, w in sources.items()], cfg.seed,
                                unique=cfg.sft.dedup)
            data.save_dataset(examples, target, cfg.sft.validation_fraction, cfg.seed, tokenizer)
        stats = json.loads((target / data.STATS_FILE).read_text(encoding="utf-8"))
        versions = {env: data.current_prompt_version(env, cfg.env) for env in stats["prompt_versions"]}
        dataset = data.load_sft_dataset(target, versions)
    _info(log, f"SFT dataset {target}: {json.dumps(stats)}")
    return dataset


def _examples_from(source: str, cfg: Any, log: Optional[RunLogger]) -> list[dict]:
    if data.is_sft_dataset(source):
        built = json.loads((Path(source) / data.STATS_FILE).read_text(encoding="utf-8"))["prompt_versions"]
        saved = data.load_sft_dataset(source, {env: data.current_prompt_version(env, cfg.env) for env in built})
        return [row for split in saved.values() for row in split]
    trajectories = data.read_collection(source)
    won = data.successful(trajectories, source)
    _info(log, f"{source}: {len(trajectories)} episodes collected, {len(won)} succeeded")
    versions = {env: data.current_prompt_version(env, cfg.env) for env in {t.env for t in won}}
    return data.build_examples(won, versions, unique=cfg.sft.dedup)


def training_chat_template(tokenizer: Any) -> Optional[str]:
    """None when the tokenizer's template has `{% generation %}` markers, else TRL's training variant."""
    from trl.chat_template_utils import get_training_chat_template, has_generation_markers

    if has_generation_markers(tokenizer.chat_template):
        return None
    return get_training_chat_template(tokenizer)  # known families (Qwen3, Llama 3, ...); raises for others


# ---------------------------------------------------------------------- trainer


def build_trainer(cfg: Any, device: str, tokenizer: Any, train: Any, validation: Any, log: Optional[RunLogger]):
    """TRL SFTTrainer (its CPU loss on supervised positions only) with our callbacks and optional LoRA."""
    from evoharness_rl.sft.loss import SupervisedHeadSFTTrainer

    args = training_args(cfg, device, has_validation=bool(validation))  # before loading: ZeRO-3 partitions the load
    dtype = _lora_dtype(cfg, device) if cfg.sft.lora else "float32"  # full training keeps fp32 master weights
    model = load_model(cfg.model, device="cpu", dtype=dtype)  # the Trainer moves it to this process's device
    trainer = SupervisedHeadSFTTrainer(
        model=model,
        args=args,
        train_dataset=train,
        eval_dataset=validation if validation else None,
        processing_class=tokenizer,
        peft_config=lora_config(cfg.sft) if cfg.sft.lora else None,
        callbacks=[MetricsCallback(log)] if log is not None else [],
    )
    trainer.remove_callback(PrinterCallback)  # logs go to run.log / metrics.jsonl, not raw dicts on stdout
    return trainer


def _lora_dtype(cfg: Any, device: str) -> str:
    if cfg.model.dtype != "auto":
        return cfg.model.dtype
    return "bfloat16" if device.startswith("cuda") else "float32"


def lora_config(sft: Any):
    from peft import LoraConfig

    return LoraConfig(r=sft.lora_r, lora_alpha=sft.lora_alpha, lora_dropout=sft.lora_dropout,
                      target_modules="all-linear", task_type="CAUSAL_LM")


def training_args(cfg: Any, device: str, has_validation: bool):
    """TRL SFTConfig from our SFTConfig (every knob explicit; TRL's own defaults differ from ours)."""
    from trl import SFTConfig

    s = cfg.sft
    on_gpu = device.startswith("cuda")
    checkpointing = on_gpu if s.gradient_checkpointing is None else s.gradient_checkpointing
    return SFTConfig(
        output_dir=str(Path(cfg.out_dir) / "checkpoints"),
        num_train_epochs=s.epochs,
        max_steps=s.max_steps,
        per_device_train_batch_size=s.per_device_batch_size,
        per_device_eval_batch_size=s.per_device_batch_size,
        gradient_accumulation_steps=s.gradient_accumulation_steps,
        learning_rate=s.learning_rate,
        lr_scheduler_type=s.lr_scheduler,
        warmup_steps=min(s.warmup_ratio, 0.999),  # a float < 1 is a ratio of the total steps
        max_grad_norm=s.max_grad_norm,
        weight_decay=s.weight_decay,
        gradient_checkpointing=checkpointing,
        bf16=on_gpu and torch.cuda.is_bf16_supported(),
        use_cpu=not on_gpu,
        max_length=s.max_seq_length,  # examples are already within it (our truncation rule)
        assistant_only_loss=True,
        packing=False,
        logging_steps=s.logging_steps,
        logging_first_step=True,
        save_strategy="steps",
        save_steps=s.save_steps,
        save_total_limit=2,
        eval_strategy="epoch" if has_validation else "no",
        prediction_loss_only=True,  # evaluation needs only the loss: no logits kept, our CPU loss path (sft/loss.py)
        report_to="none",  # metrics go through RunLogger (metrics.jsonl, wandb)
        disable_tqdm=True,  # our rich progress bar instead
        seed=cfg.seed,
        data_seed=cfg.seed,
    )


def _resume_checkpoint(cfg: Any, log: Optional[RunLogger]) -> Optional[str]:
    """The newest *complete* checkpoint (sft/checkpoints.py); the main process removes and names newer incomplete
    ones (a run killed or out of disk while saving)."""
    from evoharness_rl.sft.checkpoints import newest_complete

    folder = Path(cfg.out_dir) / "checkpoints"
    if not cfg.resume:
        return None
    last = newest_complete(folder, log.warning if log is not None else None)
    _info(log, f"resuming from {last}" if last else f"resume=true but no checkpoint in {folder}; starting fresh")
    return str(last) if last else None


# ------------------------------------------------------------------- metrics


class MetricsCallback(TrainerCallback):
    """Trainer logs -> RunLogger.metrics (loss, lr, grad norm, tokens/s) and a progress bar (step / total,
    tokens/s of the last logging interval, time left)."""

    def __init__(self, log: RunLogger):
        self.log = log
        self.bar: Optional[ProgressBar] = None
        self._mark: tuple[float, Optional[float]] = (time.perf_counter(), None)  # (time, tokens) of the last train log
        self._info: Optional[str] = None  # the bar's tokens/s, updated at each train log

    def on_train_begin(self, args, state, control, **kwargs):
        self.bar = ProgressBar(total=state.max_steps, description="sft", completed=state.global_step)  # resumed runs start part-way
        self._mark = (time.perf_counter(), None)

    def on_step_end(self, args, state, control, **kwargs):
        if self.bar is not None:
            self.bar.advance(1, info=self._info)

    def on_log(self, args, state, control, logs=None, **kwargs):
        values = {k: float(v) for k, v in (logs or {}).items() if isinstance(v, (int, float))}
        now, tokens = time.perf_counter(), values.get("num_tokens")
        if "loss" in values and tokens is not None:
            then, before = self._mark
            if before is not None and now > then:
                values["tokens_per_s"] = round((tokens - before) / (now - then), 1)
                self._info = f"{values['tokens_per_s'] / 1000:.1f}k tok/s"
            self._mark = (now, tokens)
        else:
            self._mark = (now, None)  # an evaluation ran: the next train interval starts afresh
        self.log.metrics(step=state.global_step, **values)

    def on_train_end(self, args, state, control, **kwargs):
        if self.bar is not None:
            self.bar.close()


# ---------------------------------------------------------------------- saving


def finish(trainer: Any, cfg: Any, tokenizer: Any, log: Optional[RunLogger], device: str) -> Path:
    """Save the result; merge a LoRA adapter into the base (sft.merge). Returns the checkpoint path."""
    out = Path(cfg.out_dir)
    merged = out / "merged"
    if not cfg.sft.lora:
        staging = out / ".merged.staging"
        trainer.save_model(str(staging))  # every process calls it (FSDP / ZeRO-3 gather the weights)
        if trainer.is_world_process_zero():
            tokenizer.save_pretrained(str(staging))
            from evoharness_rl.fileio import atomic_replace_dir

            atomic_replace_dir(staging, merged)
            _info(log, f"full-parameter checkpoint: {merged}")
        trainer.accelerator.wait_for_everyone()
        return merged
    adapter = out / "adapter"
    trainer.save_model(str(adapter))
    trainer.accelerator.wait_for_everyone()
    if not cfg.sft.merge:
        _info(log, f"LoRA adapter: {adapter} (sft.merge=false: not merged)")
        return adapter
    if trainer.is_world_process_zero():
        merge_adapter(cfg.model.path, adapter, merged, tokenizer, device="cuda" if device.startswith("cuda") else "cpu")
        _info(log, f"LoRA adapter {adapter} merged into {merged}")
    trainer.accelerator.wait_for_everyone()
    return merged
