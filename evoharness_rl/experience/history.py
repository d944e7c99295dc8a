"""`history.jsonl`: one line per consolidation cycle, beside the bank it produced.

    append_cycle(out_dir / HISTORY_FILE, report.cycle_record(update=u))
    cycles = read_history(path)          # in the order appended

A record (`ConsolidationReport.cycle_record`) holds the cycle number, its status (ok,
partial, failed), the bank hash before and after, episodes in the batch and read, the
operations as the consolidator chose them, as the bank applied them and as it redirected
them, and every operation with its fields, evidence references and result.

Who writes it: GRPO (`out_dir/history.jsonl`, copied into each checkpoint and `final/`
beside their `bank.json`, rolled back with metrics.jsonl on resume), online evaluation and
`collect` (`out_dir/history.jsonl` beside `out_dir/bank.json`) and `consolidate`. A line is
appended with one `write` on a file opened for appending, then fsynced: concurrent
appenders never interleave within a line, and a crash leaves at worst a torn last line,
which `read_history` skips. A cycle's line is appended after its bank was saved, so the
history never lists a cycle whose bank is not on disk.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

HISTORY_FILE = "history.jsonl"


def history_path(bank_path: str | os.PathLike) -> Path:
    """The history file beside a bank file."""
    return Path(bank_path).with_name(HISTORY_FILE)


def append_cycle(path: str | os.PathLike, record: dict[str, Any]) -> None:
    """Append one cycle's record as one line (one write call; fsynced)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = (json.dumps(record, ensure_ascii=False, default=str) + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def read_history(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The cycles of a history file in the order they were appended; an unreadable (torn) line is skipped.
    A cycle that failed to save (`BankConflict`) appears with status "failed" beside the one that was saved."""
    records = []
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict):
                records.append(record)
    return records


def save_cycle(bank: Any, report: Any, bank_path: str | os.PathLike, history_file: str | os.PathLike | None = None,
               **context: Any) -> None:
    """After a cycle: save `bank` to `bank_path`, then append the cycle to the history beside it (or to
    `history_file`). When another process changed that bank file meanwhile (`BankConflict`), the file is left as
    it is, the cycle is recorded as failed with the reason, and the conflict is raised."""
    from evoharness_rl.experience.bank import BankConflict

    target = Path(history_file) if history_file is not None else history_path(bank_path)
    try:
        bank.save(bank_path)
    except BankConflict as err:
        report.failures.append(str(err))
        append_cycle(target, {**report.cycle_record(**context), "status": "failed"})
        raise
    append_cycle(target, report.cycle_record(**context))


def start_history(target: str | os.PathLike, bank_path: str | os.PathLike | None) -> None:
    """A run that starts from the bank file `bank_path` (None: an empty bank) starts its history from that bank's
    (so `bank log` shows the lineage, e.g. collect's cycles before GRPO's); an older file at `target` is replaced."""
    from evoharness_rl.fileio import atomic_write_text

    source = history_path(bank_path) if bank_path else None
    text = source.read_text(encoding="utf-8") if source is not None and source.is_file() else ""
    if text and not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]  # a torn last line stays behind
    atomic_write_text(target, text)
