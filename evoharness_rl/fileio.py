"""Atomic writes (readers see the old file or the new one, never a half-written one) and the out_dir lock."""

from __future__ import annotations

import json
import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from evoharness_rl.errors import Refusal


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write `text` to `path` via a temporary file in the same folder and `os.replace`. A failed write (a full
    disk: `faults.DiskFull`, naming the path and the bytes it needed) removes its temporary file and leaves
    `path` as it was."""
    from evoharness_rl.faults import writing

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}")
    data = text.encode("utf-8")
    with writing(path, tmp, need=len(data)):
        with open(tmp, "wb") as fh:
            fh.write(data)
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


def move_aside(path: str | os.PathLike) -> Path:
    """Rename `path` to `<path>.replaced-<time>` beside it (never over another folder); returns the new name.
    A live job's out_dir (its lock held) is refused with OutDirBusy."""
    import time

    path = Path(path)
    holder = _lock_holder(path / LOCK_FILE)
    if holder is not None and _alive(holder):
        raise OutDirBusy(f"out_dir {path} is in use by another job (pid {holder}, see {path / LOCK_FILE}); wait for "
                         "it to end or choose another out_dir")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    aside, n = path.with_name(f"{path.name}.replaced-{stamp}"), 1
    while aside.exists():
        n += 1
        aside = path.with_name(f"{path.name}.replaced-{stamp}-{n}")
    os.replace(path, aside)
    return aside


# ------------------------------------------------------------------- out_dir lock

LOCK_FILE = ".lock"  # in a job's out_dir while it runs: the holder's pid


class OutDirBusy(Refusal):
    """Another live job holds the out_dir's lock."""


@contextmanager
def out_dir_lock(out_dir: str | os.PathLike, note: Callable[[str], None] = print) -> Iterator[None]:
    """Hold `out_dir/.lock` (this process's pid) while a job writes into `out_dir`.

    A second job into the same out_dir is refused with OutDirBusy (nothing written); a lock
    left by a process that no longer exists is taken over, and `note` says so."""
    path = Path(out_dir) / LOCK_FILE
    with pid_lock(path, note, lambda holder: OutDirBusy(
            f"out_dir {out_dir} is in use by another job (pid {holder}, see {path}); wait for it "
            "to end or choose another out_dir")):
        yield


@contextmanager
def pid_lock(path: str | os.PathLike, note: Callable[[str], None], busy: Callable[[int], Exception]) -> Iterator[None]:
    """Hold the lock file `path` (created exclusively; it holds this process's pid). A live holder raises
    `busy(its pid)`; a lock left by a process that no longer exists is taken over, and `note` says so."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            holder = _lock_holder(path)
            if holder is not None and _alive(holder):
                raise busy(holder) from None
            path.unlink(missing_ok=True)
            note(f"took over the stale lock {path} (its process {holder if holder is not None else '?'} is gone)")
            continue
        from evoharness_rl.faults import writing

        text = f"{os.getpid()}\n"
        with writing(path, path, need=len(text)):  # a full disk: the empty lock file goes too
            with os.fdopen(fd, "w") as fh:
                fh.write(text)
        break
    try:
        yield
    finally:
        if _lock_holder(path) == os.getpid():
            path.unlink(missing_ok=True)


def _lock_holder(path: Path) -> Optional[int]:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True
