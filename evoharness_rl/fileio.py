"""Atomic writes: readers see the old file or the new one, never a half-written one."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write `text` to `path` via a temporary file in the same folder and `os.replace`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def atomic_write_json(path: str | os.PathLike, data: Any, indent: int | None = 2) -> None:
    atomic_write_text(path, json.dumps(data, indent=indent, ensure_ascii=False, sort_keys=False) + "\n")


def atomic_replace_dir(tmp_dir: str | os.PathLike, final_dir: str | os.PathLike) -> None:
    """Move a fully written `tmp_dir` to `final_dir`, replacing an older one.

    The old directory is renamed aside first and removed only after the new one is in
    place, so a crash leaves either the old or the new directory (plus, at worst, a
    `.old` folder that the next call removes).
    """
    tmp_dir, final_dir = Path(tmp_dir), Path(final_dir)
    old = final_dir.with_name(final_dir.name + ".old")
    if old.exists():
        shutil.rmtree(old)
    if final_dir.exists():
        os.replace(final_dir, old)
    os.replace(tmp_dir, final_dir)
    if old.exists():
        shutil.rmtree(old)
