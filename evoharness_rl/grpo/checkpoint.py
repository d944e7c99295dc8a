"""GRPO checkpoints: everything a killed run needs to continue as if it had never stopped.

    out_dir/checkpoints/update_000010/
        model/               policy as an HF checkpoint (save_pretrained; LoRA: the adapter) + tokenizer
        optimizer.bin, scheduler.bin, random_states_<rank>.pkl    accelerate's save_state (FSDP/DeepSpeed aware)
        trainer_state.json   update index u (so lambda_div continues), sampler position, bad-update count
        bank.json            the Experience bank after update u's consolidation
        history.jsonl        out_dir/history.jsonl (the bank's consolidation cycles) as it was at this update
        metrics.jsonl        out_dir/metrics.jsonl as it was at this update

A checkpoint is written to a hidden temporary folder and renamed into place
(`fileio.atomic_replace_dir`), so a crash mid-write leaves the previous checkpoint
intact. `resume=true` continues from the newest complete one: the policy is loaded
from its `model/`, accelerate restores optimizer, scheduler and RNG states, and
metrics.jsonl and history.jsonl are rolled back to the checkpoint (lines of the interrupted
update go).

Without FSDP/DeepSpeed, accelerate's own copy of the weights is skipped (the HF
`model/` folder is the single copy); with them, accelerate also writes its sharded format.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

from evoharness_rl.errors import Refusal
from evoharness_rl.faults import writing
from evoharness_rl.fileio import atomic_replace_dir, atomic_write_json, atomic_write_text

CHECKPOINTS = "checkpoints"
RUN_LOGS = ("metrics.jsonl", "history.jsonl")  # out_dir's append-only logs: copied into a checkpoint, rolled back from it
_NAME = re.compile(r"^update_(\d{6})$")


@dataclass
class TrainerState:
    """The loop's own state (model/optimizer/scheduler/RNG are saved by accelerate)."""

    update: int = 0  # updates completed; the next update has index u = update
    sampler: dict = field(default_factory=dict)  # TaskSampler.state_dict()
    bad_updates: int = 0  # updates skipped for NaN/inf loss or reward
    optimizer_steps: int = 0  # optimizer steps taken so far
    seed: int = 0  # the run's seed (resume checks it)


def checkpoint_path(out_dir: str | Path, update: int) -> Path:
    return Path(out_dir) / CHECKPOINTS / f"update_{update:06d}"


def list_checkpoints(out_dir: str | Path) -> list[Path]:
    """Complete checkpoints of a run, oldest first."""
    root = Path(out_dir) / CHECKPOINTS
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and _NAME.match(p.name) and (p / "trainer_state.json").exists()]
    return sorted(found, key=lambda p: p.name)


def latest_checkpoint(out_dir: str | Path) -> Optional[Path]:
    found = list_checkpoints(out_dir)
    return found[-1] if found else None


def checkpoint_damage(path: str | Path) -> str:
    """What makes a checkpoint unusable ("" when nothing is found): cheap file checks of its trainer state, its
    accelerate state files (torch's zip format: a truncated one has no central directory) and its model."""
    import zipfile

    from evoharness_rl.errors import UserError

    path = Path(path)
    try:
        read_trainer_state(path)
    except (OSError, ValueError, TypeError) as err:
        return f"trainer_state.json does not load ({type(err).__name__})"
    for file in sorted(path.glob("*.bin")) + sorted(path.glob("*.pt")):
        if not zipfile.is_zipfile(file):
            return f"{file.name} is damaged or truncated"
    if (path / "model" / "config.json").is_file():
        from evoharness_rl.models import check_checkpoint

        try:
            check_checkpoint(str(path / "model"))
        except UserError as err:
            return str(err)
    return ""


def latest_usable_checkpoint(out_dir: str | Path, note=print) -> Optional[Path]:
    """The newest checkpoint without damage (`checkpoint_damage`); each newer damaged one is skipped with a note."""
    for path in reversed(list_checkpoints(out_dir)):
        damage = checkpoint_damage(path)
        if not damage:
            return path
        note(f"checkpoint {path.name} is not usable ({damage}); falling back to the one before it")
    return None


def refuse_existing_run(out_dir: str | Path, resume: bool) -> None:
    """A new run (not `resume`) into an out_dir that holds GRPO checkpoints is refused: never mix two runs."""
    latest = None if resume else latest_checkpoint(out_dir)
    if latest is not None:
        raise Refusal(f"{out_dir} already holds a GRPO run (latest checkpoint: {latest.name}); pass resume=true to "
                      "continue it, or choose another out_dir")


def register_hf_model_hooks(accelerator) -> None:
    """Let the HF `model/` folder be the only copy of unsharded weights in a checkpoint."""

    def skip_weights(models, weights, output_dir):
        weights.clear()  # FSDP/DeepSpeed never fill `weights`; they keep their own format

    def skip_loading(models, input_dir):
        models.clear()  # the policy was already loaded from <checkpoint>/model before `prepare`

    accelerator.register_save_state_pre_hook(skip_weights)
    accelerator.register_load_state_pre_hook(skip_loading)


def save_checkpoint(accelerator, out_dir: str | Path, state: TrainerState, model, tokenizer, bank=None,
                    keep: int = 2, extra=None) -> Path:
    """Write checkpoint `update_<state.update>` atomically; keep the newest `keep` checkpoints. `extra(folder)`:
    what every process adds to the folder (the batches in flight, grpo/pipeline.py)."""
    final = checkpoint_path(out_dir, state.update)
    tmp = final.with_name(f".{final.name}.tmp")
    if accelerator.is_main_process and tmp.exists():
        shutil.rmtree(tmp)
    accelerator.wait_for_everyone()
    with writing(final, tmp, need=lambda: checkpoint_need(model)):  # a full disk: one line, no .tmp folder left
        accelerator.save_state(str(tmp))  # every process writes its part (optimizer shards, RNG states)
        if extra is not None:
            extra(tmp)
        accelerator.wait_for_everyone()
        state_dict = accelerator.get_state_dict(model)  # gathered from shards when FSDP/DeepSpeed
        if accelerator.is_main_process:
            accelerator.unwrap_model(model).save_pretrained(tmp / "model", state_dict=state_dict)
            tokenizer.save_pretrained(tmp / "model")
            if bank is not None:
                bank.save(tmp / "bank.json")
            copy_run_logs(out_dir, tmp)
            atomic_write_json(tmp / "trainer_state.json", asdict(state))  # written last: marks the folder complete
            atomic_replace_dir(tmp, final)
    if accelerator.is_main_process:
        for old in list_checkpoints(out_dir)[:-keep] if keep > 0 else []:
            shutil.rmtree(old, ignore_errors=True)
    accelerator.wait_for_everyone()
    return final


def checkpoint_need(model, optimizer: bool = True) -> int:
    """About the bytes a checkpoint of `model` takes: its weights, and (`optimizer`) AdamW's two fp32 moments of
    every trainable parameter (what a full disk's error line says the checkpoint needed)."""
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    return weights + (sum(2 * 4 * p.numel() for p in model.parameters() if p.requires_grad) if optimizer else 0)


def copy_run_logs(out_dir: str | Path, folder: Path, names: tuple[str, ...] = None) -> None:
    """Copy the run's append-only logs (RUN_LOGS, or `names`) that exist into `folder`."""
    for name in names or RUN_LOGS:
        if (Path(out_dir) / name).exists():
            shutil.copyfile(Path(out_dir) / name, folder / name)


def read_trainer_state(path: str | Path) -> TrainerState:
    data = json.loads((Path(path) / "trainer_state.json").read_text(encoding="utf-8"))
    known = TrainerState.__dataclass_fields__
    return TrainerState(**{k: v for k, v in data.items() if k in known})


def restore_checkpoint(accelerator, path: str | Path, out_dir: str | Path) -> TrainerState:
    """Load optimizer/scheduler/RNG states and roll metrics.jsonl back to the checkpoint."""
    path = Path(path)
    accelerator.load_state(str(path))
    if accelerator.is_main_process:
        for name in RUN_LOGS:
            saved, live = path / name, Path(out_dir) / name
            if saved.exists() or live.exists():
                atomic_write_text(live, saved.read_text(encoding="utf-8") if saved.exists() else "")
    accelerator.wait_for_everyone()
    return read_trainer_state(path)


def describe(path: Any) -> str:
    state = read_trainer_state(path)
    return f"{path} (update {state.update}, {state.optimizer_steps} optimizer steps)"
