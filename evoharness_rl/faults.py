"""Faults that come from the machine or the user's hands, each turned into one line (docs/faults.md).

- A full disk. `disk_full(err)` recognises ENOSPC / EDQUOT anywhere in an error's causes, and the errors torch
  and safetensors raise in their place (`unexpected pos`, `file write failed`) when the disk they wrote to is
  in fact (nearly) full. `writing(path, need)` wraps one write: on any failure it removes the write's own
  temporary file or folder, and a full disk becomes `DiskFull`, which names the path and the space it needed.
- Ctrl-C and SIGTERM (what SLURM and Kubernetes send). `catch_signals()` makes SIGTERM unwind like Ctrl-C
  (`Terminated`, so `finally` blocks and multiprocessing's finalizers run and no semaphore leaks), and arms a
  watchdog: a run that has not unwound `UNWIND_S` seconds after the signal is ended at once, with the same
  line. The CLI prints that line (`stop_line`) and exits 130 (SIGINT) or 143 (SIGTERM).
- `remove_temps(out_dir)`: what a failed or interrupted job leaves of its own temporary files (this process's
  `.NAME.tmp.PID` files, the hidden `.NAME.tmp` / `.merged.staging` folders of a job that holds the out_dir's
  lock) is removed on the way out; finished files are never touched.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import signal
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Optional

from evoharness_rl.errors import UserError

DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
LOW_SPACE_BYTES = 1 << 20  # a torch / safetensors write error counts as a full disk when less than this is free
# What torch's zip writer and safetensors say instead of ENOSPC when a write runs out of space.
_WRITE_FAILURE = re.compile(r"unexpected pos|file write failed|No space left on device|Disk quota exceeded")
UNWIND_S = 1.8  # after Ctrl-C / SIGTERM, the run has this long to unwind before it is ended at once
_MAIN_PID = os.getpid()


class DiskFull(UserError):
    """A write that ran out of space: the path, the space it needed (None: unknown) and what is free now."""

    def __init__(self, path: str | os.PathLike, need: Optional[int] = None, written: int = 0):
        self.path, self.need, self.written = Path(path), need, written
        super().__init__(self.describe())

    def describe(self) -> str:
        free = free_bytes(self.path)
        if self.need:
            needed = f"needs about {human(self.need)}"
        elif self.written:
            needed = f"needs more than the {human(self.written)} it had written"
        else:
            needed = "found no space"
        if free is None:
            where = ""
        elif free < (self.need or self.written or 1):
            where = f"; {human(free)} is free there"
        else:  # other writers (logs, other records) took their share, or the failed write's space came back
            where = f"; the disk filled up while it wrote ({human(free)} free now)"
        return f"disk full: writing {self.path} {needed}{where}; free space (or choose a directory on a larger disk)"


def human(size: Optional[int]) -> str:
    """A byte count for people: 812 B, 3.4 MB, 1.2 GB."""
    if size is None:
        return "?"
    for unit in ("B", "kB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} TB"


def free_bytes(path: str | os.PathLike) -> Optional[int]:
    """Bytes free to this user on the disk that holds `path` (its nearest existing folder); None if unknown."""
    here = Path(path)
    while not here.exists() and here != here.parent:
        here = here.parent
    try:
        stats = os.statvfs(here)
    except OSError:
        return None
    return stats.f_bavail * stats.f_frsize


def size_of(path: str | os.PathLike) -> int:
    """Bytes in a file, or in every file under a folder (0 when it is gone)."""
    path = Path(path)
    if path.is_file():
        return path.stat().st_size
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return 0


def _causes(err: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        yield err
        err = err.__cause__ or err.__context__


def disk_full(err: BaseException, path: Optional[str | os.PathLike] = None) -> bool:
    """Whether `err` (or one of its causes) is a write that ran out of space. torch's and safetensors' write errors
    carry no errno: they count when the disk holding `path` has less than LOW_SPACE_BYTES free."""
    for cause in _causes(err):
        if isinstance(cause, DiskFull):
            return True
        if isinstance(cause, OSError) and cause.errno in DISK_ERRNOS:
            return True
        text = str(cause)
        if "No space left on device" in text or "Disk quota exceeded" in text:
            return True
        if path is not None and _WRITE_FAILURE.search(text):
            free = free_bytes(path)
            if free is not None and free < LOW_SPACE_BYTES:
                return True
    return False


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


@contextmanager
def writing(path: str | os.PathLike, temp: Optional[str | os.PathLike] = None,
            need: Optional[int | Callable[[], Optional[int]]] = None) -> Iterator[None]:
    """Around one write of `path` through `temp`: on any failure (an interrupt too) `temp` is removed; a full disk
    is raised as DiskFull naming `path` and `need` (bytes, or a function computing them when needed)."""
    try:
        yield
    except BaseException as err:
        written = size_of(temp) if temp is not None else 0
        full = not isinstance(err, DiskFull) and disk_full(err, temp if temp is not None else path)
        if temp is not None:
            _remove(Path(temp))
        if full:
            raise DiskFull(path, need() if callable(need) else need, written) from err
        raise


def as_disk_full(err: BaseException, out_dir: Optional[str | os.PathLike]) -> Optional[DiskFull]:
    """`err` as a DiskFull (None when it is not a full disk): the one already raised by `writing`, or one naming
    the file the error names (else `out_dir`) for a write that no `writing` wrapped."""
    for cause in _causes(err):
        if isinstance(cause, DiskFull):
            return cause
    if not disk_full(err, out_dir):
        return None
    filename = next((c.filename for c in _causes(err) if isinstance(c, OSError) and c.filename), None)
    return DiskFull(filename or out_dir or ".")


def release(err: BaseException) -> None:
    """Drop the tracebacks of `err` and its causes and collect garbage: a writer's file objects that the frames
    still reference are closed, so the space of the temporary files removed is free again."""
    import gc

    for cause in _causes(err):
        cause.__traceback__ = None
    gc.collect()


# ------------------------------------------------------------------ what a failed job leaves behind


def remove_temps(out_dir: Optional[str | os.PathLike], holds_lock: bool = True) -> list[Path]:
    """Remove this process's temporary files under `out_dir` (`.NAME.tmp.PID`) and, when this job holds the
    out_dir's lock, the hidden temporary folders its writers stage in (`.NAME.tmp`, `.merged.staging`) at the
    top and in checkpoints/. Finished files are never touched. Returns what was removed."""
    if not out_dir or not Path(out_dir).is_dir():
        return []
    root = Path(out_dir)
    mine = re.compile(rf"^\..+\.tmp\.{os.getpid()}$")
    found = [p for p in root.rglob(".*") if mine.match(p.name)]
    if holds_lock:
        for folder in (root, root / "checkpoints"):
            if folder.is_dir():
                found += [p for p in folder.iterdir() if p.is_dir() and p.name.startswith(".")
                          and (p.name.endswith(".tmp") or p.name == ".merged.staging")]
    for path in found:
        _remove(path)
    return found


# ------------------------------------------------------------------ Ctrl-C and SIGTERM


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C's KeyboardInterrupt so the run unwinds the same way."""


EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}
_received: list[int] = []  # the signals this process got, in order
_on_timeout: list[Callable[[int], None]] = []  # what the watchdog runs before ending the process


_installed: list[bool] = []  # catch_signals ran: this process is the CLI's (not a test calling main())


def exit_now(code: int) -> None:
    """End an interrupted CLI process at once, cleanly: the atexit handlers run (multiprocessing's finalizers unlink
    their semaphores, wandb finishes), the interpreter's own teardown (seconds of garbage collection over torch's
    modules) is skipped. In a process that did not `catch_signals` (a test calling main()): sys.exit."""
    if not _installed:
        sys.exit(code)
    import atexit

    sys.stdout.flush()
    sys.stderr.flush()
    try:
        atexit._run_exitfuncs()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def received() -> Optional[int]:
    """The first interrupting signal this process got (None: none)."""
    return _received[0] if _received else None


def catch_signals(on_timeout: Callable[[int], None]) -> None:
    """SIGINT and SIGTERM raise KeyboardInterrupt / Terminated in the main thread and start a watchdog: if the
    process is still running UNWIND_S seconds later, `on_timeout(signal)` runs (it prints the line and removes
    temporary files) and the process ends with the signal's exit code. A second signal ends it at once.
    Processes forked from this one take the default action (a worker must not unwind as the CLI does)."""
    _on_timeout[:] = [on_timeout]
    _installed.append(True)
    signal.signal(signal.SIGINT, _handle)
    signal.signal(signal.SIGTERM, _handle)


def _handle(signum: int, frame) -> None:
    if os.getpid() != _MAIN_PID:  # a forked child: what the signal would have done without our handler
        signal.signal(signum, signal.SIG_DFL if signum == signal.SIGTERM else signal.default_int_handler)
        if signum == signal.SIGTERM:
            os.kill(os.getpid(), signum)
            return
        raise KeyboardInterrupt
    if _received:  # a second Ctrl-C: the user does not want to wait for the unwinding
        _end_now(_received[0])
    _received.append(signum)
    threading.Thread(target=_watchdog, args=(signum,), daemon=True, name="interrupt-watchdog").start()
    raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


def _watchdog(signum: int) -> None:
    time.sleep(UNWIND_S)
    _end_now(signum)


_line = threading.Lock()  # held by whichever thread writes the interrupt line: it is written once


def _end_now(signum: int) -> None:
    """The watchdog's (or a second signal's) way out: the line, unless the main thread wrote it, then exit."""
    try:
        if _line.acquire(blocking=False):
            for callback in _on_timeout:
                callback(signum)
    finally:
        sys.stderr.flush()
        os._exit(EXIT_CODES.get(signum, 1))


def claim_line() -> bool:
    """Claim the one interrupt line for the main thread: False when the watchdog is already writing it."""
    return _line.acquire(blocking=False)
