"""SFT checkpoints (TRL's `checkpoints/checkpoint-N`): which are complete, and which a resume takes.

The Trainer writes a checkpoint in place: the weights first, then the optimizer, scheduler and RNG states, then
`trainer_state.json`. A run killed (or out of disk) while saving leaves a folder with part of that. `resume=true`
takes the newest *complete* checkpoint, as GRPO's resume does, and names the incomplete ones it skipped; those
are removed (nothing can continue from them, and the Trainer would save its next checkpoint into the folder).
"""

from __future__ import annotations

import json
import re
import shutil
import zipfile
from pathlib import Path
from typing import Callable, Optional

_NAME = re.compile(r"^checkpoint-(\d+)$")
WEIGHT_FILES = ("model.safetensors", "adapter_model.safetensors", "pytorch_model.bin", "adapter_model.bin")


def checkpoints(folder: str | Path) -> list[Path]:
    """`folder`'s checkpoint-N folders, oldest (smallest N) first."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    found = [p for p in folder.iterdir() if p.is_dir() and _NAME.match(p.name)]
    return sorted(found, key=lambda p: int(_NAME.match(p.name).group(1)))


def damage(path: str | Path) -> str:
    """What a resume would miss in checkpoint `path` ("" when it is complete): trainer_state.json that loads,
    the model or adapter weights (whole: a safetensors file as long as its header says), the optimizer state."""
    path = Path(path)
    try:
        json.loads((path / "trainer_state.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        return "no trainer_state.json"
    except (OSError, ValueError):
        return "trainer_state.json does not load"
    weights = [path / name for name in WEIGHT_FILES if (path / name).is_file()]
    weights += [path / shard for index in path.glob("*.index.json") for shard in _shards(index)]
    if not weights:
        return "no model weights"
    for file in weights:
        problem = _weights_damage(file)
        if problem:
            return problem
    optimizer = [p for p in path.iterdir() if p.name.startswith("optimizer") or p.name.startswith("global_step")]
    if not optimizer:
        return "no optimizer state"
    for file in optimizer:
        if file.suffix in (".pt", ".bin") and file.is_file() and not zipfile.is_zipfile(file):
            return f"{file.name} is truncated"
    return ""


def _shards(index: Path) -> list[str]:
    try:
        return sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
    except (OSError, ValueError, KeyError, AttributeError):
        return [index.name + " (unreadable)"]


def _weights_damage(file: Path) -> str:
    if not file.is_file():
        return f"{file.name} is missing"
    if file.suffix == ".bin":
        return "" if zipfile.is_zipfile(file) else f"{file.name} is truncated"
    try:  # safetensors: 8-byte header length, the JSON header, then the tensors up to the largest end offset
        with open(file, "rb") as fh:
            size = int.from_bytes(fh.read(8), "little")
            header = json.loads(fh.read(size))
        end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return f"{file.name} is damaged"
    return "" if file.stat().st_size >= 8 + size + end else f"{file.name} is truncated"


def newest_complete(folder: str | Path, note: Optional[Callable[[str], None]] = None) -> Optional[Path]:
    """The newest complete checkpoint in `folder` (None: none). Each newer incomplete one is removed and named
    to `note` in one line, when `note` is given (a resume); without it nothing is touched."""
    skipped = []
    for path in reversed(checkpoints(folder)):
        problem = damage(path)
        if not problem:
            break
        skipped.append((path, problem))
    else:
        path = None
    if note is not None and skipped:
        for old, _ in skipped:
            shutil.rmtree(old, ignore_errors=True)
        names = "; ".join(f"{p.name} ({problem})" for p, problem in skipped)
        then = f"resuming from {path.name}" if path is not None else "no complete checkpoint is left: starting afresh"
        note(f"skipped and removed the incomplete checkpoint{'s' if len(skipped) > 1 else ''} {names}; {then}")
    return path


def remove_unfinished(folder: str | Path) -> list[Path]:
    """Remove the checkpoints newer than the newest complete one (what a failed or interrupted save left)."""
    removed = []
    for path in reversed(checkpoints(folder)):
        if not damage(path):
            break
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def finished_result(cfg) -> Optional[Path]:
    """The result a finished SFT run in `cfg.out_dir` holds (None: it has not finished): `merged/` (full training,
    or LoRA with sft.merge), else `adapter/`, with whole weights. `merged/` is renamed into place only when it is
    complete; an adapter is checked file by file."""
    out = Path(cfg.out_dir)
    target = out / ("adapter" if cfg.sft.lora and not cfg.sft.merge else "merged")
    weights = [target / name for name in WEIGHT_FILES if (target / name).is_file()]
    weights += [target / shard for index in target.glob("*.index.json") for shard in _shards(index)]
    if not (target / ("adapter_config.json" if target.name == "adapter" else "config.json")).is_file() or not weights:
        return None
    return None if any(_weights_damage(file) for file in weights) else target
